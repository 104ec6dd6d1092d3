package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// workspace is a deterministic snapshot of groups groups and keys keys, sorted as Translate sorts them.
func workspace(groups, keys int) *Snapshot {
	s := &Snapshot{
		Namespace: "ws",
		Workspace: Workspace{Name: "ws", ModelAPILimits: &ModelAPILimits{RequestsPerMinute: 60}},
		Endpoints: []Endpoint{{ID: "e", Slug: "demo/echo", Targets: []Target{{Provider: "OPENAI", BaseURL: "http://x/v1"}}}},
	}
	for i := range groups {
		s.Groups = append(s.Groups, Group{ID: fmt.Sprintf("g-%06d", i), ExternalEntityID: fmt.Sprintf("ext-%06d", i), Mode: "INDEPENDENT", Depth: 1,
			Models: []Model{{Slug: "demo/echo", RateLimits: []Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 600, SourceGroup: "g"}}}}})
	}
	for i := range keys {
		sum := sha256.Sum256([]byte(fmt.Sprint(i)))
		s.APIKeys = append(s.APIKeys, APIKey{ID: fmt.Sprintf("k-%07d", i), Prefix: fmt.Sprintf("mgk_%012d", i), Hash: hex.EncodeToString(sum[:]),
			GroupID: s.Groups[i%groups].ID})
	}
	return s
}

func decodeAll(t *testing.T, parts []Part) *Snapshot {
	t.Helper()
	var dec []*Snapshot
	for _, p := range parts {
		d, err := DecodePart(p.Payload, p.Hash)
		if err != nil {
			t.Fatal(err)
		}
		dec = append(dec, d)
	}
	s, err := Merge(dec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hashes(parts []Part) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.Hash
	}
	return out
}

// changed counts the parts of after whose hash before does not have: what a publication writes.
func changed(before, after []Part) (n, bytes int) {
	have := map[string]bool{}
	for _, p := range before {
		have[p.Hash] = true
	}
	for _, p := range after {
		if !have[p.Hash] {
			n++
			bytes += len(p.Payload)
		}
	}
	return n, bytes
}

func TestEncodePartsRoundTrip(t *testing.T) {
	want := workspace(5000, 20000)
	parts, sum, err := EncodeParts(want, MaxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 3 {
		t.Fatalf("%d parts, want a head and several ranges", len(parts))
	}
	if sum != PartsChecksum(PartList(parts)) {
		t.Error("checksum is not the hash of the part list")
	}
	for _, p := range parts {
		if p.Hash != Checksum(p.Payload) {
			t.Errorf("part %s is not named by its content", p.Hash)
		}
	}
	if got := decodeAll(t, parts); !reflect.DeepEqual(got, want) {
		t.Error("decoding and merging the parts did not give the snapshot back")
	}
	again, _, _ := EncodeParts(want, MaxChunkBytes)
	if !slices.Equal(hashes(parts), hashes(again)) {
		t.Error("encoding the same snapshot twice gave different parts")
	}
}

// TestEncodePartsRewritesOnlyWhatChanged is the point of the layout: a change to one group, one key, or an
// added or removed group leaves every other part as it was.
func TestEncodePartsRewritesOnlyWhatChanged(t *testing.T) {
	base := workspace(5000, 20000)
	before, _, err := EncodeParts(base, MaxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		change func(s *Snapshot) *Snapshot
	}{
		{"one group's limit", func(s *Snapshot) *Snapshot {
			s.Groups = slices.Clone(s.Groups)
			g := s.Groups[2500]
			g.Models = []Model{{Slug: "demo/echo", RateLimits: []Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 1, SourceGroup: g.ID}}}}
			s.Groups[2500] = g
			return s
		}},
		{"one key added", func(s *Snapshot) *Snapshot {
			k := APIKey{ID: "new", Prefix: "mgk_000000010000x", Hash: strings.Repeat("a", 64), GroupID: "g-000001"}
			i, _ := slices.BinarySearchFunc(s.APIKeys, k.Prefix, func(a APIKey, p string) int { return strings.Compare(a.Prefix, p) })
			s.APIKeys = slices.Insert(slices.Clone(s.APIKeys), i, k)
			return s
		}},
		{"one group removed", func(s *Snapshot) *Snapshot {
			s.Groups = slices.Delete(slices.Clone(s.Groups), 1234, 1235)
			return s
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := *base
			after, _, err := EncodeParts(tc.change(&s), MaxChunkBytes)
			if err != nil {
				t.Fatal(err)
			}
			if n, b := changed(before, after); n != 1 {
				t.Errorf("%d of %d parts changed (%d bytes), want 1", n, len(after), b)
			}
			if got := decodeAll(t, after); !reflect.DeepEqual(got, &s) {
				t.Error("the changed parts do not decode to the changed snapshot")
			}
		})
	}
}

func TestEncodePartsHalvesOversizedRanges(t *testing.T) {
	s := workspace(3000, 0)
	parts, _, err := EncodeParts(s, 8<<10)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if len(p.Payload) > 8<<10 {
			t.Errorf("part of %d bytes, want at most %d", len(p.Payload), 8<<10)
		}
	}
	if got := decodeAll(t, parts); !reflect.DeepEqual(got, s) {
		t.Error("halved ranges do not decode to the snapshot")
	}
}

func TestRanges(t *testing.T) {
	key := func(i int) string { return fmt.Sprintf("g-%06d", i) }
	// Golden boundaries: they are part of the format, since they decide which parts a change rewrites.
	got := Ranges(40, key, 8)
	want := [][2]int{}
	lo := 0
	for i := range 40 {
		if fnv64(key(i))%8 == 0 || i+1-lo >= 32 {
			want = append(want, [2]int{lo, i + 1})
			lo = i + 1
		}
	}
	if lo < 40 {
		want = append(want, [2]int{lo, 40})
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Ranges = %v, want %v", got, want)
	}
	// Every item is in exactly one range, in order, and no range exceeds 4×target.
	for _, n := range []int{0, 1, 7, 1000} {
		rs := Ranges(n, key, 8)
		next := 0
		for _, r := range rs {
			if r[0] != next || r[1] <= r[0] || r[1]-r[0] > 32 {
				t.Fatalf("n=%d: bad range %v after %d", n, r, next)
			}
			next = r[1]
		}
		if next != n {
			t.Fatalf("n=%d: ranges cover %d items", n, next)
		}
	}
}

func TestPartsRefuseTampering(t *testing.T) {
	parts, _, err := EncodeParts(workspace(3000, 5000), MaxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	p := parts[1]
	if _, err := DecodePart(flip(p.Payload), p.Hash); !errors.Is(err, ErrChecksum) {
		t.Errorf("a flipped byte: %v, want ErrChecksum", err)
	}
	if _, err := DecodePart(parts[2].Payload, p.Hash); !errors.Is(err, ErrChecksum) {
		t.Errorf("another part's bytes under this name: %v, want ErrChecksum", err)
	}
	dec := func(ps ...Part) []*Snapshot {
		var out []*Snapshot
		for _, p := range ps {
			d, err := DecodePart(p.Payload, p.Hash)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		return out
	}
	if _, err := Merge(dec(parts[1], parts[0])); err == nil {
		t.Error("a range part first was merged as a head")
	}
	other, _, _ := EncodeParts(&Snapshot{Namespace: "other", Groups: workspace(10, 0).Groups}, MaxChunkBytes)
	if _, err := Merge(dec(parts[0], other[1])); err == nil {
		t.Error("a part of another namespace was merged")
	}
	for _, list := range []string{"", "abc", strings.Repeat("A", 64), strings.Repeat("a", 64) + "\n", strings.Repeat("g", 64)} {
		if _, err := ParsePartList(list); err == nil {
			t.Errorf("ParsePartList(%q) accepted it", list)
		}
	}
	if hs, err := ParsePartList(PartList(parts)); err != nil || !slices.Equal(hs, hashes(parts)) {
		t.Errorf("ParsePartList of a real list: %v %v", hs, err)
	}
}

func fnv64(s string) uint64 {
	var h uint64 = 14695981039346656037
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// TestPartsEncoderReusesUnchangedRanges checks that the encoder with a memory gives exactly EncodeParts' output,
// and encodes only the ranges a change touched.
func TestPartsEncoderReusesUnchangedRanges(t *testing.T) {
	var e PartsEncoder
	base := workspace(5000, 20000)
	first, sum1, err := e.Encode(base, MaxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	want, wantSum, _ := EncodeParts(base, MaxChunkBytes)
	if !slices.Equal(hashes(first), hashes(want)) || sum1 != wantSum {
		t.Fatal("a first call differs from EncodeParts")
	}
	if e.Reused != 0 {
		t.Errorf("a first call reused %d ranges", e.Reused)
	}
	ranges := e.Encoded

	changed := workspace(5000, 20000)
	changed.Groups[2500].Models[0].RateLimits[0].Threshold = 1
	got, sum, err := e.Encode(changed, MaxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	want, wantSum, _ = EncodeParts(changed, MaxChunkBytes)
	if !slices.Equal(hashes(got), hashes(want)) || sum != wantSum {
		t.Fatal("a call with a memory differs from EncodeParts")
	}
	if e.Encoded != 1 || e.Reused != ranges-1 {
		t.Errorf("encoded %d and reused %d ranges of %d, want 1 and %d", e.Encoded, e.Reused, ranges, ranges-1)
	}

	other := workspace(5000, 20000)
	other.Namespace = "other"
	if _, _, err := e.Encode(other, MaxChunkBytes); err != nil {
		t.Fatal(err)
	}
	if e.Reused != 0 {
		t.Errorf("reused %d ranges of another namespace", e.Reused)
	}
}
