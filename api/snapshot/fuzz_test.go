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

// FuzzDecodePartKeys checks that DecodePartKeys accepts exactly what Decode accepts, with the same snapshot and
// keys, whether its scanner of the encoder's shape reads the keys or the document is parsed whole.
func FuzzDecodePartKeys(f *testing.F) {
	parts, _, err := EncodeParts(workspace(2, 40), MaxChunkBytes)
	if err != nil {
		f.Fatal(err)
	}
	for _, doc := range []string{keysDoc(`[` + goodKey + `]`), keysDoc(`[]`), keysDoc(`null`), keysDoc(`[` + goodKey + `,` + goodKey + `]`)} {
		f.Add([]byte(doc))
	}
	for _, p := range parts {
		zr, err := gzip.NewReader(bytes.NewReader(p.Payload))
		if err != nil {
			f.Fatal(err)
		}
		var doc bytes.Buffer
		if _, err := doc.ReadFrom(zr); err != nil {
			f.Fatal(err)
		}
		f.Add(doc.Bytes())
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		sameAsDecode(t, "fuzzed", gzipped(t, doc))
	})
}
