package view

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/limits"
)

// partKeys are n keys of group g, named after part.
func partKeys(part string, n int, g string) (keys []snapshot.APIKey, plain []string) {
	for i := range n {
		k := fmt.Sprintf("mgk_%s%06d.secretsecretsecretsecretsecret", part, i)
		keys = append(keys, snapshot.APIKey{ID: fmt.Sprintf("%s-%d", part, i), Prefix: k[:16], Hash: hashOf(k), GroupID: g})
		plain = append(plain, k)
	}
	return keys, plain
}

// TestBuildPartsReusesKeyBlocks: a load that passes the unchanged parts of keys without their keys serves them
// from the view being served, pointing at the groups of the new view; the key index is kept while no key
// moved and rebuilt when one did; a part without keys that the view being served does not hold is refused.
func TestBuildPartsReusesKeyBlocks(t *testing.T) {
	store := limits.NewMemory()
	s := testSnapshot("ns", "CASCADING")
	s.APIKeys = nil
	aKeys, aPlain := partKeys("aaaaaa", 3, "leaf")
	bKeys, bPlain := partKeys("bbbbbb", 3, "root")
	first, err := BuildParts(s, []KeyPart{{Hash: "a", Keys: aKeys}, {Hash: "b", Keys: bKeys}}, 1, "x", store, nil)
	if err != nil {
		t.Fatal(err)
	}
	v1 := Empty().With(first)
	// Requests keep reading the view being served while the next ones are built (go test -race).
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if k := v1.LookupKey(aPlain[0]); k == nil || k.Group != first.Groups["leaf"] || k.Shared != nil {
				t.Error("the view being served changed under a request")
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()

	// The leaf's limit changes; neither part of keys is decoded again.
	changed := testSnapshot("ns", "CASCADING")
	changed.APIKeys = nil
	changed.Groups[1].Models[0].RateLimits[1].Threshold = 6
	second, err := BuildParts(changed, []KeyPart{{Hash: "a"}, {Hash: "b"}}, 2, "y", store, first)
	if err != nil {
		t.Fatal(err)
	}
	v2 := v1.With(second)
	if v2.keys != v1.keys {
		t.Error("the key index was rebuilt although no key moved")
	}
	if k := v2.LookupKey(aPlain[1]); k == nil || k.Group != second.Groups["leaf"] || k.Group == first.Groups["leaf"] {
		t.Errorf("a key of the changed leaf resolves to %+v, want the new view's leaf", k)
	}
	if k := v2.LookupKey(bPlain[2]); k == nil || k.Group != first.Groups["root"] {
		t.Errorf("a key of the unchanged root resolves to %+v, want the root reused from the view being served", k)
	}
	if second.keyParts["b"] != first.keyParts["b"] {
		t.Error("the block of part b was copied although none of its groups changed")
	}
	if k := v1.LookupKey(aPlain[1]); k == nil || k.Group != first.Groups["leaf"] {
		t.Error("building the next view changed the keys of the view being served")
	}

	// Part b is rewritten without its first key: the index is rebuilt, the revoked key is gone.
	third, err := BuildParts(changed, []KeyPart{{Hash: "a"}, {Hash: "b2", Keys: bKeys[1:]}}, 3, "z", store, second)
	if err != nil {
		t.Fatal(err)
	}
	v3 := v2.With(third)
	if v3.keys == v2.keys {
		t.Error("the key index was kept although a key was removed")
	}
	if v3.LookupKey(bPlain[0]) != nil || v3.HasKey("ns", bKeys[0].Prefix) {
		t.Error("the revoked key is still served")
	}
	for _, k := range append(aPlain, bPlain[1:]...) {
		if v3.LookupKey(k) == nil {
			t.Errorf("key %s is no longer served", k[:16])
		}
	}
	if !v3.HasKey("ns", bKeys[1].Prefix) || v3.HasKey("other", bKeys[1].Prefix) {
		t.Error("HasKey does not tell the served key of ns apart from another namespace's")
	}

	// A model-API tier on a shared Endpoint gives the keys of a reused block their shared plans, in a copy: the
	// view being served keeps its keys without.
	tiered := testSnapshot("ns", "CASCADING")
	tiered.APIKeys = nil
	tiered.Groups[1].Models[0].RateLimits[1].Threshold = 6
	tiered.Workspace.ModelAPILimits = &snapshot.ModelAPILimits{RequestsPerMinute: 5}
	tiered.Endpoints = []snapshot.Endpoint{{ID: "e", Slug: "s", SharedModelAPI: true, Targets: []snapshot.Target{{BaseURL: "http://upstream/v1"}}}}
	fourth, err := BuildParts(tiered, []KeyPart{{Hash: "a"}, {Hash: "b2"}}, 4, "t", store, third)
	if err != nil {
		t.Fatal(err)
	}
	if k := v3.With(fourth).LookupKey(aPlain[0]); k == nil || k.Shared["s"] == nil {
		t.Errorf("a key of a reused block has no shared plan under the tier: %+v", k)
	}
	if k := v3.LookupKey(aPlain[0]); k == nil || k.Shared != nil {
		t.Error("binding the tier changed the keys of the view being served")
	}

	// A part without keys must be one of the view being served.
	if _, err := BuildParts(changed, []KeyPart{{Hash: "c"}}, 4, "w", store, third); err == nil {
		t.Error("a part without keys that the view being served does not hold was accepted")
	}
	// A reused block whose group is gone is refused, as a decoded key of a missing group is.
	gone := testSnapshot("ns", "CASCADING")
	gone.APIKeys, gone.Groups = nil, gone.Groups[:1]
	if _, err := BuildParts(gone, []KeyPart{{Hash: "a"}}, 4, "w", store, third); err == nil {
		t.Error("a reused key of a group that is gone was accepted")
	}
}

// TestBuildWholeSnapshotOfManyKeys: a snapshot loaded whole (inline or numbered chunks) holds more keys than one
// block; every one of them is served.
func TestBuildWholeSnapshotOfManyKeys(t *testing.T) {
	s := testSnapshot("ns", "CASCADING")
	keys, plain := partKeys("many", maxBlockKeys+10, "leaf")
	s.APIKeys = keys
	ns, err := Build(s, 1, "x", limits.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	v := Empty().With(ns)
	for _, i := range []int{0, maxBlockKeys - 1, maxBlockKeys, maxBlockKeys + 9} {
		if k := v.LookupKey(plain[i]); k == nil || k.ID != keys[i].ID {
			t.Errorf("key %d: found %+v", i, k)
		}
	}
}

// TestKeyPartBuilderMatchesCompactKeyPart: keys added one at a time, as a decode hands them over, give the part
// CompactKeyPart gives for the same decoded keys, and are refused for the same reasons; builders reused from the
// pool keep nothing of an earlier part.
func TestKeyPartBuilderMatchesCompactKeyPart(t *testing.T) {
	build := func(hash string, keys []snapshot.APIKey) (KeyPart, error) {
		b := NewKeyPartBuilder(hash)
		for _, k := range keys {
			if err := b.Add([]byte(k.ID), []byte(k.Prefix), []byte(k.Hash), []byte(k.GroupID)); err != nil {
				return KeyPart{}, err
			}
		}
		if b.Len() != len(keys) {
			t.Fatalf("Len %d after %d keys", b.Len(), len(keys))
		}
		return b.Part(), nil
	}
	for _, n := range []int{0, 1, 3000, 70} {
		keys, _ := partKeys(fmt.Sprintf("p%05d", n), n, fmt.Sprintf("group-%d", n))
		want, err := CompactKeyPart("h", keys)
		if err != nil {
			t.Fatal(err)
		}
		got, err := build("h", keys)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.compact.block, want.compact.block) || !slices.Equal(got.compact.groups, want.compact.groups) {
			t.Errorf("%d keys: built %+v, want %+v", n, got.compact, want.compact)
		}
	}
	good, _ := partKeys("badbad", 2, "g")
	for name, bad := range map[string]snapshot.APIKey{
		"short prefix": {ID: "k", Prefix: "mgk_1", Hash: good[0].Hash, GroupID: "g"},
		"short hash":   {ID: "k", Prefix: good[0].Prefix, Hash: good[0].Hash[:10], GroupID: "g"},
		"hash not hex": {ID: "k", Prefix: good[0].Prefix, Hash: strings.Repeat("zz", 32), GroupID: "g"},
	} {
		keys := []snapshot.APIKey{good[0], bad, good[1]}
		_, want := CompactKeyPart("h", keys)
		_, err := build("h", keys)
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	many, _ := partKeys("toomny", maxBlockKeys+1, "g")
	if _, err := build("h", many); err == nil {
		t.Errorf("a part of %d keys was built", len(many))
	}
}
