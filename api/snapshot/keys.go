package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// KeySink receives the federated keys of a part as DecodePartKeys parses them: the ID, prefix, hash and group ID
// of one key. The slices are valid only during the call, so a sink copies what it keeps.
type KeySink func(id, prefix, hash, groupID []byte) error

// DecodePartKeys is DecodePart, except that every federated key of the part goes to add instead of into
// APIKeys, which stay nil: a start decoding a million keys then allocates no record, and no string, per key.
//
// The part is decompressed whole (a part is at most MaxChunkBytes compressed). When its keys are in the shape
// the encoder writes (keyFields, without whitespace or escapes), a scanner of that shape reads them and the
// rest of the document is parsed as Decode parses it, with an empty array in their place; anything else is
// parsed whole as Decode parses it. Both accept and refuse the same parts. Display names are checked and not
// passed on.
func DecodePartKeys(payload []byte, hash string, add KeySink) (*Snapshot, error) {
	s, err := decodeKeys(payload, hash, add)
	if err != nil {
		return nil, fmt.Errorf("part %s: %w", hash, err)
	}
	return s, nil
}

// scratch is the memory of one part's decode, reused: a start decodes hundreds of parts.
type scratch struct {
	doc bytes.Buffer
	// fields bounds the ID, prefix, hash and group ID of each key in doc: eight offsets a key.
	fields []uint32
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// maxKeptScratch is the largest document a scratch keeps for reuse; a part decompresses to a few MiB.
const maxKeptScratch = 64 << 20

func release(sc *scratch) {
	if sc.doc.Cap() <= maxKeptScratch {
		scratches.Put(sc)
	}
}

// decodeKeys is DecodePartKeys without the part's name in its errors.
func decodeKeys(payload []byte, checksum string, add KeySink) (*Snapshot, error) {
	r, err := open(payload, checksum)
	if err != nil {
		return nil, err
	}
	sc := scratches.Get().(*scratch)
	defer release(sc)
	sc.doc.Reset()
	// ReadFrom reads to the end, so gzip checks its trailer (length and CRC) too.
	if _, err := sc.doc.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("failed to decompress snapshot: %w", err)
	}
	doc := sc.doc.Bytes()
	if s, ok := splitKeys(doc, sc); ok {
		f := sc.fields
		for i := 0; i < len(f); i += 8 {
			if err := add(doc[f[i]:f[i+1]], doc[f[i+2]:f[i+3]], doc[f[i+4]:f[i+5]], doc[f[i+6]:f[i+7]]); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	var s Snapshot
	if err := json.Unmarshal(doc, &s, decodeOptions); err != nil {
		return nil, fmt.Errorf("failed to parse snapshot: %w", err)
	}
	s.intern()
	for _, k := range s.APIKeys {
		if err := add([]byte(k.ID), []byte(k.Prefix), []byte(k.Hash), []byte(k.GroupID)); err != nil {
			return nil, err
		}
	}
	s.APIKeys = nil
	return &s, nil
}

// keysMember starts the snapshot's member of keys when they are not null.
const keysMember = `"apiKeys":[`

// splitKeys finds the keys of doc when they are in the shape the encoder writes, and bounds their fields in
// sc.fields; s is doc parsed with an empty array in place of theirs. It reports false when the first
// "apiKeys":[ of doc does not start such an array, or does not start the value of the snapshot's member; doc is
// then to be parsed whole.
func splitKeys(doc []byte, sc *scratch) (s *Snapshot, ok bool) {
	i := bytes.Index(doc, []byte(keysMember))
	if i < 0 {
		return nil, false
	}
	lo := i + len(keysMember) - 1
	hi, ok := scanKeys(doc, lo, sc)
	if !ok {
		return nil, false
	}
	rest := make([]byte, 0, lo+2+len(doc)-hi)
	rest = append(append(append(rest, doc[:lo]...), "[]"...), doc[hi:]...)
	// The array cut out must be the value of the snapshot's apiKeys, the only member of its type: the decoder
	// reaches it right after the member's name, one byte (the colon) before lo.
	at := int64(-1)
	where := json.UnmarshalFromFunc(func(dec *jsontext.Decoder, _ *[]APIKey) error {
		at = dec.InputOffset()
		return errors.ErrUnsupported
	})
	var out Snapshot
	if err := json.Unmarshal(rest, &out, json.JoinOptions(decodeOptions, json.WithUnmarshalers(where))); err != nil || at != int64(lo-1) {
		return nil, false
	}
	out.intern()
	out.APIKeys = nil
	return &out, true
}

// keyFields are the members of a key in the order the encoder writes them, each with the quote that opens its
// value; a "name" (keyName) may follow.
var keyFields = [...]string{`{"id":"`, `","prefix":"`, `","hash":"`, `","groupID":"`}

const keyName = `","name":"`

// scanKeys reads the array of keys that starts at doc[lo], bounding their fields in sc.fields, and returns the
// offset just past it. ok is false when the array is not in the encoder's shape.
func scanKeys(doc []byte, lo int, sc *scratch) (hi int, ok bool) {
	sc.fields = sc.fields[:0]
	at := lo + 1
	if at < len(doc) && doc[at] == ']' {
		return at + 1, true
	}
	for {
		if at, ok = scanKey(doc, at, sc); !ok {
			return 0, false
		}
		switch {
		case at == len(doc):
			return 0, false
		case doc[at] == ']':
			return at + 1, true
		case doc[at] != ',':
			return 0, false
		}
		at++
	}
}

// scanKey bounds, in sc.fields, the ID, prefix, hash and group ID of the key that starts at doc[at] when it is
// in exactly the shape the encoder writes, and returns the offset just past it. It reports false for anything
// else: other members, another order, whitespace, escapes, or another type.
func scanKey(doc []byte, at int, sc *scratch) (next int, ok bool) {
	for _, lit := range keyFields {
		if !bytes.HasPrefix(doc[at:], []byte(lit)) {
			return 0, false
		}
		start := at + len(lit)
		if at, ok = scanString(doc, start); !ok {
			return 0, false
		}
		sc.fields = append(sc.fields, uint32(start), uint32(at))
	}
	if bytes.HasPrefix(doc[at:], []byte(keyName)) {
		if at, ok = scanString(doc, at+len(keyName)); !ok {
			return 0, false
		}
	}
	if !bytes.HasPrefix(doc[at:], []byte(`"}`)) {
		return 0, false
	}
	return at + 2, true
}

// scanString finds the closing quote of the string whose body starts at doc[at]. It takes only a body that is
// its own value: valid UTF-8 without escapes or control characters.
func scanString(doc []byte, at int) (end int, ok bool) {
	ascii := true
	for i, c := range doc[at:] {
		switch {
		case c == '"':
			if !ascii && !utf8.Valid(doc[at:at+i]) {
				return 0, false
			}
			return at + i, true
		case c == '\\' || c < 0x20:
			return 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return 0, false
}
