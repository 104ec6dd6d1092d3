package view

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/api/v1alpha1/pricing"
	"github.com/modelgate/modelgate/gatewayd/limits"
)

func hashOf(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

const key1 = "mgk_AAAAAAAAAAAA.secretsecretsecretsecretsecret0001"

func testSnapshot(ns, mode string) *snapshot.Snapshot {
	return &snapshot.Snapshot{
		Namespace: ns,
		Groups: []snapshot.Group{
			{ID: "root", Mode: mode, Depth: 1, Models: []snapshot.Model{{Slug: "s",
				RateLimits: []snapshot.Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 10, SourceGroup: "root"}}}}},
			{ID: "leaf", ParentID: "root", Mode: mode, Depth: 2, Models: []snapshot.Model{{Slug: "s",
				RateLimits: []snapshot.Limit{
					{Type: "REQUEST", Unit: "MINUTE", Threshold: 10, SourceGroup: "root"},
					{Type: "TOKEN", Unit: "SECOND", Threshold: 5, SourceGroup: "leaf"},
				},
				UsageLimits: []snapshot.Limit{{Type: "TOKEN", Unit: "DAY", Threshold: 100, SourceGroup: "leaf"}}}}},
		},
		APIKeys: []snapshot.APIKey{{ID: "k", Prefix: key1[:16], Hash: hashOf(key1), GroupID: "leaf"}},
	}
}

func TestPlanMeteringAndOrder(t *testing.T) {
	for _, tc := range []struct {
		mode        string
		rootCharged string // the group whose bucket the root-declared limit charges for a leaf call
	}{{"CASCADING", "root"}, {"INDEPENDENT", "leaf"}} {
		ns, err := Build(testSnapshot("ns", tc.mode), 1, "x", limits.NewMemory(), nil)
		if err != nil {
			t.Fatal(err)
		}
		p := ns.Groups["leaf"].Models["s"].Plan
		if len(p.Limits) != 3 {
			t.Fatalf("%s: %d limits, want 3", tc.mode, len(p.Limits))
		}
		// Nearest declaring group first: the leaf's own limits, then the root's.
		if p.Limits[0].SourceGroup != "leaf" || p.Limits[1].SourceGroup != "leaf" || p.Limits[2].SourceGroup != "root" {
			t.Errorf("%s: order %v", tc.mode, p.Limits)
		}
		if g := p.Limits[2].Key.Group; g != tc.rootCharged {
			t.Errorf("%s: root's limit charges %s, want %s", tc.mode, g, tc.rootCharged)
		}
	}
}

func TestBuildRefusesInconsistentSnapshots(t *testing.T) {
	for name, mutate := range map[string]func(*snapshot.Snapshot){
		"unknown group": func(s *snapshot.Snapshot) { s.APIKeys[0].GroupID = "gone" },
		"bad hash":      func(s *snapshot.Snapshot) { s.APIKeys[0].Hash = "zz" },
		"short prefix":  func(s *snapshot.Snapshot) { s.APIKeys[0].Prefix = "mgk_" },
		"unknown unit":  func(s *snapshot.Snapshot) { s.Groups[0].Models[0].RateLimits[0].Unit = "HOUR" },
		"relative URL": func(s *snapshot.Snapshot) {
			s.Endpoints = []snapshot.Endpoint{{ID: "e", Slug: "s", Targets: []snapshot.Target{{BaseURL: "/v1"}}}}
		},
		"no target":      func(s *snapshot.Snapshot) { s.Endpoints = []snapshot.Endpoint{{ID: "e", Slug: "s"}} },
		"negative limit": func(s *snapshot.Snapshot) { s.Groups[0].Models[0].RateLimits[0].Threshold = -1 },
		"bad price": func(s *snapshot.Snapshot) {
			s.Endpoints = []snapshot.Endpoint{{ID: "e", Slug: "s", Targets: []snapshot.Target{{BaseURL: "http://a/v1",
				Pricing: &snapshot.Pricing{OutputPerMillionTokens: "-1"}}}}}
		},
	} {
		s := testSnapshot("ns", "CASCADING")
		mutate(s)
		if _, err := Build(s, 1, "x", limits.NewMemory(), nil); err == nil {
			t.Errorf("%s: Build accepted it", name)
		}
	}
}

// TestTargetPricesParsedOnLoad: a target's price strings are read once, exactly, into micro-USD per million
// tokens; a target without pricing has the zero price.
func TestTargetPricesParsedOnLoad(t *testing.T) {
	s := testSnapshot("ns", "CASCADING")
	s.Endpoints = []snapshot.Endpoint{{ID: "e", Slug: "s", Targets: []snapshot.Target{
		{Name: "a", BaseURL: "http://a/v1", Pricing: &snapshot.Pricing{InputPerMillionTokens: "0.60", OutputPerMillionTokens: "15.000001"}},
		{Name: "b", BaseURL: "http://b/v1"},
	}}}
	ns, err := Build(s, 1, "x", limits.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := ns.Endpoints["s"].Targets
	if got, want := ts[0].Price, (pricing.Pricing{Input: 600_000, Output: 15_000_001}); got != want {
		t.Errorf("price of a = %+v, want %+v", got, want)
	}
	if ts[1].Price != (pricing.Pricing{}) {
		t.Errorf("price of the unpriced b = %+v, want zero", ts[1].Price)
	}
}

// TestLookupAcrossNamespaces: a prefix is unique per namespace only, so two namespaces may share one; the
// hash decides.
func TestLookupAcrossNamespaces(t *testing.T) {
	other := key1[:16] + ".anothersecretanothersecretanother"
	a := testSnapshot("a", "CASCADING")
	b := testSnapshot("b", "CASCADING")
	b.APIKeys[0].Hash = hashOf(other)
	store := limits.NewMemory()
	na, _ := Build(a, 1, "x", store, nil)
	nb, _ := Build(b, 1, "x", store, nil)
	v := Empty().With(na).With(nb)
	if k := v.LookupKey(key1); k == nil || k.Group.Namespace != "a" {
		t.Fatalf("key of a: %+v", k)
	}
	if k := v.LookupKey(other); k == nil || k.Group.Namespace != "b" {
		t.Fatalf("key of b: %+v", k)
	}
	for _, bad := range []string{key1[:16] + ".wrong", "short", ""} {
		if v.LookupKey(bad) != nil {
			t.Errorf("%q authenticated", bad)
		}
	}
	// Replacing a namespace drops its old keys.
	b.APIKeys = nil
	nb2, _ := Build(b, 2, "y", store, nil)
	if v.With(nb2).LookupKey(other) != nil {
		t.Error("revoked key still found")
	}
}

// TestBuildReusesUnchangedGroups: loading a snapshot in which one group changed keeps the resolved Group (and
// its bound plans) of every unchanged group, rebuilds the changed one with its new limits, drops a removed one,
// and leaves keys pointing at the groups of the new view.
func TestBuildReusesUnchangedGroups(t *testing.T) {
	store := limits.NewMemory()
	a := testSnapshot("ns", "CASCADING")
	a.Groups = append(a.Groups, snapshot.Group{ID: "other", Mode: "CASCADING", Depth: 1, Models: []snapshot.Model{{Slug: "s"}}})
	prev, err := Build(a, 1, "x", store, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := testSnapshot("ns", "CASCADING")
	b.Groups[1].Models[0].RateLimits[1].Threshold = 6 // leaf's own TOKEN SECOND limit
	next, err := Build(b, 2, "y", store, prev)
	if err != nil {
		t.Fatal(err)
	}
	if next.Groups["root"] != prev.Groups["root"] {
		t.Error("the unchanged root was rebuilt")
	}
	if next.Groups["leaf"] == prev.Groups["leaf"] {
		t.Fatal("the changed leaf kept its old resolution")
	}
	var got []int64
	for _, l := range next.Groups["leaf"].Models["s"].Plan.Limits {
		got = append(got, l.Threshold)
	}
	if !slices.Contains(got, 6) || slices.Contains(got, 5) {
		t.Errorf("leaf thresholds after the change = %v, want the new 6 and not the old 5", got)
	}
	if _, ok := next.Groups["other"]; ok {
		t.Error("a group missing from the new snapshot is still served")
	}
	if k := Empty().With(next).LookupKey(key1); k == nil || k.Group != next.Groups["leaf"] {
		t.Errorf("the key resolves to %+v, want the new view's leaf", k)
	}
}

func BenchmarkLookupKey(b *testing.B) {
	store := limits.NewMemory()
	s := testSnapshot("ns", "CASCADING")
	for i := range 10000 {
		k := fmt.Sprintf("mgk_%012d.secretsecretsecretsecretsecret0001", i)
		s.APIKeys = append(s.APIKeys, snapshot.APIKey{ID: k, Prefix: k[:16], Hash: hashOf(k), GroupID: "leaf"})
	}
	ns, err := Build(s, 1, "x", store, nil)
	if err != nil {
		b.Fatal(err)
	}
	v := Empty().With(ns)
	b.ReportAllocs()
	for b.Loop() {
		if v.LookupKey(key1) == nil {
			b.Fatal("not found")
		}
	}
}

// bigSnapshot is a workspace of n groups: n/5 five-level CASCADING chains, each group with one slug and
// REQUEST and TOKEN limits on MINUTE and DAY, one key per group, ten endpoints.
func bigSnapshot(n int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Namespace: "big"}
	for i := range n {
		id := fmt.Sprintf("g%05d", i)
		depth := i%5 + 1
		g := snapshot.Group{ID: id, ExternalEntityID: "ext-" + id, Mode: "CASCADING", Depth: depth}
		if depth > 1 {
			g.ParentID = fmt.Sprintf("g%05d", i-1)
		}
		m := snapshot.Model{Slug: fmt.Sprintf("model-%d", i%10)}
		for d := range depth {
			src := fmt.Sprintf("g%05d", i-d)
			m.RateLimits = append(m.RateLimits, snapshot.Limit{Type: "REQUEST", Unit: "MINUTE", Threshold: 600, SourceGroup: src},
				snapshot.Limit{Type: "TOKEN", Unit: "MINUTE", Threshold: 60000, SourceGroup: src})
			m.UsageLimits = append(m.UsageLimits, snapshot.Limit{Type: "TOKEN", Unit: "DAY", Threshold: 1000000, SourceGroup: src})
		}
		g.Models = []snapshot.Model{m}
		s.Groups = append(s.Groups, g)
		k := fmt.Sprintf("mgk_%012d.secretsecretsecretsecretsecret0001", i)
		s.APIKeys = append(s.APIKeys, snapshot.APIKey{ID: k, Prefix: k[:16], Hash: hashOf(k), GroupID: id})
	}
	for i := range 10 {
		s.Endpoints = append(s.Endpoints, snapshot.Endpoint{ID: fmt.Sprint(i), Slug: fmt.Sprintf("model-%d", i),
			Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: "http://upstream:8000/v1"}}})
	}
	return s
}

// BenchmarkDecodeAndSwap10kGroups is what a snapshot load costs gatewayd after a change to one group: verify
// and decode the payload, build the view with bound plans (reusing the unchanged groups of the view being
// served), and swap it in. Loads alternate between two snapshots that differ in one group's threshold.
func BenchmarkDecodeAndSwap10kGroups(b *testing.B) {
	big := bigSnapshot(10000)
	p1, sum1, err := snapshot.Encode(big)
	if err != nil {
		b.Fatal(err)
	}
	big.Groups[5000].Models[0].RateLimits[0].Threshold++
	p2, sum2, err := snapshot.Encode(big)
	if err != nil {
		b.Fatal(err)
	}
	payloads, sums := [2][]byte{p1, p2}, [2]string{sum1, sum2}
	store := limits.NewMemory()
	var current atomic.Pointer[View]
	current.Store(Empty())
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s, err := snapshot.Decode(payloads[i%2], sums[i%2])
		if err != nil {
			b.Fatal(err)
		}
		ns, err := Build(s, int64(i+1), sums[i%2], store, current.Load().Namespace(s.Namespace))
		if err != nil {
			b.Fatal(err)
		}
		current.Store(current.Load().With(ns))
	}
}

// BenchmarkDecode10kGroups isolates the snapshot.Decode part of a load (checksum, gunzip, JSON).
func BenchmarkDecode10kGroups(b *testing.B) {
	payload, sum, err := snapshot.Encode(bigSnapshot(10000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := snapshot.Decode(payload, sum); err != nil {
			b.Fatal(err)
		}
	}
}
