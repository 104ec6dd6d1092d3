package snapshot

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"unsafe"
)

func sample(groups int) *Snapshot {
	s := &Snapshot{
		Namespace: "default",
		Workspace: Workspace{Name: "default", ModelAPILimits: &ModelAPILimits{RequestsPerMinute: 60}},
		APIKeys:   []APIKey{{ID: "k", Prefix: "mgk_AAAAAAAAAAAA", Hash: "00", GroupID: "g-0"}},
		Endpoints: []Endpoint{{ID: "e", Slug: "demo/echo", Targets: []Target{{Provider: "OPENAI", BaseURL: "http://x/v1"}}}},
	}
	for i := range groups {
		// Random ids keep the payload from compressing away, so large samples really are large.
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		s.Groups = append(s.Groups, Group{
			ID: fmt.Sprintf("g-%d-%s", i, hex.EncodeToString(id)), ExternalEntityID: hex.EncodeToString(id), Mode: "INDEPENDENT", Depth: 1,
			Models: []Model{{Slug: "demo/echo", RateLimits: []Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 600, SourceGroup: "g"}}}},
		})
	}
	return s
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	want := sample(3)
	payload, sum, err := Encode(want)
	if err != nil {
		t.Fatal(err)
	}
	if sum != Checksum(payload) {
		t.Fatalf("Encode returned checksum %s, payload hashes to %s", sum, Checksum(payload))
	}
	got, err := Decode(payload, sum)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip changed the snapshot:\n got %+v\nwant %+v", got, want)
	}
	again, _, _ := Encode(want)
	if !bytes.Equal(payload, again) {
		t.Error("encoding the same snapshot twice gave different bytes")
	}
}

func TestDecodeRefusesChecksumMismatch(t *testing.T) {
	payload, sum, err := Encode(sample(1))
	if err != nil {
		t.Fatal(err)
	}
	other, otherSum, _ := Encode(sample(2))
	for name, tc := range map[string]struct {
		payload []byte
		sum     string
	}{
		"flipped byte":       {flip(payload), sum},
		"other checksum":     {payload, otherSum},
		"other payload":      {other, sum},
		"empty checksum":     {payload, ""},
		"chunks of two runs": {append(append([]byte{}, payload[:len(payload)/2]...), other[len(other)/2:]...), sum},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Decode(tc.payload, tc.sum); !errors.Is(err, ErrChecksum) {
				t.Errorf("Decode = %v, want ErrChecksum", err)
			}
		})
	}
}

func TestDecodeRefusesTruncatedPayload(t *testing.T) {
	payload, sum, err := Encode(sample(50))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 10, len(payload) / 2, len(payload) - 1} {
		// As gatewayd sees it: the index names the checksum of the whole payload, a chunk is missing bytes.
		if _, err := Decode(payload[:n], sum); !errors.Is(err, ErrChecksum) {
			t.Errorf("Decode of %d of %d bytes = %v, want ErrChecksum", n, len(payload), err)
		}
	}
	for _, n := range []int{0, 10, len(payload) / 2} {
		// Even with a checksum that matches the cut bytes, the cut deflate stream itself is refused.
		truncated := payload[:n]
		if s, err := Decode(truncated, Checksum(truncated)); err == nil {
			t.Errorf("Decode of %d of %d bytes succeeded with %d groups, want an error", n, len(payload), len(s.Groups))
		}
	}
}

func TestDecodeRefusesUnknownFields(t *testing.T) {
	payload := gzipped(t, []byte(`{"namespace":"default","fromTheFuture":true}`))
	if _, err := Decode(payload, Checksum(payload)); err == nil {
		t.Error("Decode accepted a field it does not know")
	}
}

func TestSplitAndRejoin(t *testing.T) {
	payload, sum, err := Encode(sample(40000))
	if err != nil {
		t.Fatal(err)
	}
	if len(payload) <= MaxChunkBytes {
		t.Fatalf("sample is %d bytes, want more than %d to exercise chunking", len(payload), MaxChunkBytes)
	}
	chunks := Split(payload, MaxChunkBytes)
	if want := (len(payload) + MaxChunkBytes - 1) / MaxChunkBytes; len(chunks) != want {
		t.Fatalf("Split gave %d chunks, want %d", len(chunks), want)
	}
	var joined []byte
	for i, c := range chunks {
		if len(c) > MaxChunkBytes || len(c) == 0 {
			t.Errorf("chunk %d has %d bytes, want 1..%d", i, len(c), MaxChunkBytes)
		}
		joined = append(joined, c...)
	}
	s, err := Decode(joined, sum)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Groups) != 40000 {
		t.Errorf("rejoined snapshot has %d groups, want 40000", len(s.Groups))
	}
	if _, err := Decode(bytes.Join(chunks[:len(chunks)-1], nil), sum); !errors.Is(err, ErrChecksum) {
		t.Errorf("Decode without the last chunk = %v, want ErrChecksum", err)
	}
}

func TestSplitKeepsSmallPayloadInline(t *testing.T) {
	for _, n := range []int{0, 1, MaxChunkBytes} {
		if chunks := Split(make([]byte, n), MaxChunkBytes); chunks != nil {
			t.Errorf("Split of %d bytes gave %d chunks, want nil (inline)", n, len(chunks))
		}
	}
	if chunks := Split(make([]byte, 10), 3); len(chunks) != 4 || len(chunks[3]) != 1 {
		t.Errorf("Split of 10 bytes by 3 gave %d chunks", len(chunks))
	}
}

func TestChunkName(t *testing.T) {
	if got := ChunkName(1); got != "modelgate-snapshot-1" {
		t.Errorf("ChunkName(1) = %q", got)
	}
}

func flip(b []byte) []byte {
	out := bytes.Clone(b)
	out[len(out)/2] ^= 0xff
	return out
}

// TestDecodeSharesRepeatedGroupStrings: a decoded snapshot reads as encoded, and the group IDs its groups repeat
// as parents and limit sources are one copy each. The decoder's own cache of recent strings (256 entries) forgets
// them across a part of a thousand groups; the snapshot's interning does not.
func TestDecodeSharesRepeatedGroupStrings(t *testing.T) {
	want := &Snapshot{Namespace: "ns"}
	root := "root-6f1c2a7e-9b4d-4e0f"
	for i := range 2000 {
		g := Group{ID: fmt.Sprintf("%s-%04d", root, i), Mode: "CASCADING", Depth: 2, ParentID: root + "-0000",
			Models: []Model{{Slug: "vendor/a-model-of-some-size",
				RateLimits: []Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 10, SourceGroup: root + "-0000"}}}}}
		if i == 0 {
			g.ParentID, g.Depth = "", 1
		}
		want.Groups = append(want.Groups, g)
	}
	payload, sum, err := Encode(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(payload, sum)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the decoded snapshot differs from the encoded one")
	}
	first, last := &got.Groups[0], &got.Groups[len(got.Groups)-1]
	for what, s := range map[string]string{"parent": last.ParentID, "limit source": last.Models[0].RateLimits[0].SourceGroup} {
		if unsafe.StringData(s) != unsafe.StringData(first.ID) {
			t.Errorf("%s of the last group: a copy of %q apart from the first group's ID", what, s)
		}
	}
}
