package snapshot

import (
	"bytes"
	"compress/gzip"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// decodeKeysOf is DecodePartKeys with the keys its sink receives, as records.
func decodeKeysOf(payload []byte, hash string) (*Snapshot, []APIKey, error) {
	var keys []APIKey
	s, err := DecodePartKeys(payload, hash, func(id, prefix, hash, groupID []byte) error {
		keys = append(keys, APIKey{ID: string(id), Prefix: string(prefix), Hash: string(hash), GroupID: string(groupID)})
		return nil
	})
	return s, keys, err
}

// sameAsDecode checks that DecodePartKeys of payload accepts it exactly when Decode does, with the same snapshot
// and the same keys (without their display names, which it does not pass on), in order.
func sameAsDecode(t *testing.T, name string, payload []byte) {
	t.Helper()
	sum := Checksum(payload)
	want, wantErr := Decode(payload, sum)
	got, keys, err := decodeKeysOf(payload, sum)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%s: DecodePartKeys error %v, Decode error %v", name, err, wantErr)
	}
	if err != nil {
		if !strings.Contains(err.Error(), "part "+sum) {
			t.Errorf("%s: the error does not name the part: %v", name, err)
		}
		return
	}
	wantKeys := slices.Clone(want.APIKeys)
	for i := range wantKeys {
		wantKeys[i].Name = ""
	}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("%s: keys %v, want %v", name, keys, wantKeys)
	}
	want.APIKeys = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: snapshot %+v, want %+v", name, got, want)
	}
}

// TestDecodePartKeysMatchesDecode: every part of a workspace, keys with and without display names, decodes to
// what DecodePart gives, its keys through the sink.
func TestDecodePartKeysMatchesDecode(t *testing.T) {
	s := workspace(3000, 20000)
	for i := range s.APIKeys {
		if i%3 == 0 {
			s.APIKeys[i].Name = "Schlüssel " + s.APIKeys[i].ID
		}
		if i%5 == 0 {
			s.APIKeys[i].Name = "plain name"
		}
	}
	parts, _, err := EncodeParts(s, MaxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range parts {
		_, keys, err := decodeKeysOf(p.Payload, p.Hash)
		if err != nil {
			t.Fatal(err)
		}
		n += len(keys)
		sameAsDecode(t, "part "+p.Hash, p.Payload)
		// The encoder's keys are read by the scanner, not parsed whole.
		doc, err := Decode(p.Payload, p.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := splitKeys(inflated(t, p.Payload), new(scratch)); ok != (len(doc.APIKeys) > 0) {
			t.Errorf("part %s of %d keys: scanned %v", p.Hash, len(doc.APIKeys), ok)
		}
	}
	if n != len(s.APIKeys) {
		t.Errorf("%d keys through the sink, want %d", n, len(s.APIKeys))
	}
}

const (
	goodHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	goodKey  = `{"id":"k1","prefix":"mgk_000000000001","hash":"` + goodHash + `","groupID":"g"}`
	tail     = `,"workspaceAPIKeys":null,"endpoints":null,"models":null,"deployments":null}`
)

// keysDoc is a partial snapshot whose apiKeys member is keys, raw.
func keysDoc(keys string) string {
	return `{"namespace":"ws","workspace":{"membershipManaged":false},"groups":null,"apiKeys":` + keys + tail
}

// TestDecodePartKeysOtherShapes: documents the encoder does not write, accepted or refused, decode as Decode
// decodes them: whatever the scanner of the encoder's shape does not take is parsed whole.
func TestDecodePartKeysOtherShapes(t *testing.T) {
	for name, doc := range map[string]string{
		"null keys":           keysDoc(`null`),
		"no keys":             keysDoc(`[]`),
		"one key":             keysDoc(`[` + goodKey + `]`),
		"a name":              keysDoc(`[{"id":"k1","prefix":"mgk_000000000001","hash":"` + goodHash + `","groupID":"g","name":"n"}]`),
		"members reordered":   keysDoc(`[{"prefix":"mgk_000000000001","id":"k1","hash":"` + goodHash + `","groupID":"g"}]`),
		"whitespace":          keysDoc(`[ ` + goodKey + ` , ` + goodKey + ` ]`),
		"escaped ID":          keysDoc(`[{"id":"k\u0031","prefix":"mgk_000000000001","hash":"` + goodHash + `","groupID":"g"}]`),
		"escaped name":        keysDoc(`[{"id":"k1","prefix":"mgk_000000000001","hash":"` + goodHash + `","groupID":"g","name":"a\"b"}]`),
		"unicode ID":          keysDoc(`[{"id":"kü","prefix":"mgk_000000000001","hash":"` + goodHash + `","groupID":"g"}]`),
		"keys before groups":  `{"apiKeys":[` + goodKey + `],"namespace":"ws","groups":null}`,
		"keys member escaped": `{"namespace":"ws","groups":null,"\u0061piKeys":[` + goodKey + `]}`,
		"keys in a string":    `{"namespace":"ws\"apiKeys\":[{\"id\":\"k1\"}]","apiKeys":[` + goodKey + `]}`,
		// Refused by both.
		"keys in a name":       `{"namespace":"ws","x\"apiKeys":[` + goodKey + `],"apiKeys":[` + goodKey + `]}`,
		"keys nested":          `{"namespace":"ws","workspace":{"apiKeys":[` + goodKey + `]}}`,
		"keys twice":           keysDoc(`[` + goodKey + `],"apiKeys":[` + goodKey + `]`),
		"unknown key member":   keysDoc(`[{"id":"k1","prefix":"mgk_000000000001","hash":"` + goodHash + `","groupID":"g","x":1}]`),
		"duplicate key member": keysDoc(`[{"id":"k1","id":"k2","prefix":"mgk_000000000001","hash":"` + goodHash + `","groupID":"g"}]`),
		"hash not a string":    keysDoc(`[{"id":"k1","prefix":"mgk_000000000001","hash":1,"groupID":"g"}]`),
		"keys not an array":    keysDoc(`"x"`),
		"a key not an object":  keysDoc(`[1]`),
		"control character":    keysDoc(`[{"id":"k` + "\x01" + `","prefix":"mgk_000000000001","hash":"` + goodHash + `","groupID":"g"}]`),
		"invalid UTF-8":        keysDoc(`[{"id":"k` + "\xff" + `","prefix":"mgk_000000000001","hash":"` + goodHash + `","groupID":"g"}]`),
		"truncated":            keysDoc(`[` + goodKey + `,` + goodKey)[:len(keysDoc(``))+len(goodKey)+20],
		"truncated in a key":   keysDoc(`[` + goodKey)[:len(keysDoc(``))+30],
		"array not closed":     keysDoc(`[` + goodKey + `,` + goodKey + tail),
		"trailing comma":       keysDoc(`[` + goodKey + `,]`),
		"trailing data":        keysDoc(`[`+goodKey+`]`) + `{}`,
		"unknown member":       keysDoc(`[` + goodKey + `]`)[:len(keysDoc(`[`+goodKey+`]`))-1] + `,"x":1}`,
	} {
		sameAsDecode(t, name, gzipped(t, []byte(doc)))
	}
}

// TestDecodePartKeysRefusesCorruptParts: a corrupt part is refused with an error that names it, whether its
// bytes do not match its name or they do but are not a whole snapshot; an error of the sink stops the decode.
func TestDecodePartKeysRefusesCorruptParts(t *testing.T) {
	parts, _, err := EncodeParts(workspace(10, 5000), MaxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	p := parts[len(parts)-1]
	for name, payload := range map[string][]byte{
		"a flipped byte":        flip(p.Payload),
		"truncated":             p.Payload[:len(p.Payload)/2],
		"not gzip":              []byte("not gzip"),
		"truncated JSON":        gzipped(t, []byte(keysDoc(`[` + goodKey + `,` + goodKey))[:len(keysDoc(``))+40]),
		"a garbled key":         gzipped(t, []byte(keysDoc(`[`+goodKey+`,{"id":"k2",]`))),
		"a hash not hex":        gzipped(t, []byte(keysDoc(`[{"id":"k1","prefix":"mgk_000000000001","hash":"zz","groupID":"g"}]`))),
		"a duplicate namespace": gzipped(t, []byte(`{"namespace":"ws","namespace":"other","apiKeys":[`+goodKey+`]}`)),
	} {
		hash := Checksum(payload)
		if name == "a flipped byte" || name == "truncated" {
			hash = p.Hash
		}
		var sinkErr error
		if name == "a hash not hex" {
			sinkErr = errFromSink
		}
		_, err := DecodePartKeys(payload, hash, func(id, prefix, h, groupID []byte) error {
			if len(h) != 64 {
				return sinkErr
			}
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "part "+hash) {
			t.Errorf("%s: %v, want an error naming the part", name, err)
		}
	}
}

var errFromSink = errSink("the sink refused a key")

type errSink string

func (e errSink) Error() string { return string(e) }

func inflated(t *testing.T, payload []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}
