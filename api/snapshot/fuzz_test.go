package snapshot

import (
	"bytes"
	"compress/gzip"
	"testing"
)

// FuzzDecode feeds arbitrary payloads, with a matching checksum so that they reach decompression and parsing,
// and checks that Decode refuses or accepts without panicking, and that whatever it accepts encodes again.
func FuzzDecode(f *testing.F) {
	good, _, err := Encode(&Snapshot{Namespace: "ws", Groups: []Group{{ID: "g", ExternalEntityID: "e", Mode: "CASCADING", Depth: 1,
		Models: []Model{{Slug: "m", RateLimits: []Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 1, SourceGroup: "g"}}}}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte("not gzip"))
	var trailing bytes.Buffer
	zw := gzip.NewWriter(&trailing)
	_, _ = zw.Write([]byte(`{"namespace":"ws"} {"namespace":"other"}`))
	_ = zw.Close()
	f.Add(trailing.Bytes())
	f.Fuzz(func(t *testing.T, payload []byte) {
		s, err := Decode(payload, Checksum(payload))
		if err != nil {
			return
		}
		if _, _, err := Encode(s); err != nil {
			t.Fatalf("a decoded snapshot does not encode again: %v", err)
		}
	})
}
