package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
)

// Content-addressed layout. A workspace whose payload does not fit in one ConfigMap is not cut into numbered
// byte ranges any more (a change anywhere shifted every byte after it, so every chunk was rewritten): it is cut
// into parts by stable key ranges, and each part is a ConfigMap named after the SHA-256 of its bytes.
//
//   - Part 0, the head, is the snapshot without its Groups and APIKeys: workspace settings, workspace keys,
//     endpoints, models, deployments, teams. It is small.
//   - Then the Groups (sorted by ID) and then the APIKeys (sorted by Prefix), in ranges. A range ends after an
//     item whose key hashes to 0 modulo the target count (content-defined boundaries), or at four times the
//     target. Inserting or removing an item moves at most the boundaries of its own range, so a change to
//     one group rewrites its range and the head at most, and the index.
//   - Each part is the gzip'd JSON of a partial Snapshot (Namespace plus its items), so the decoder is the
//     one of the inline layout.
//
// The index carries DataFormat FormatContent, DataParts (the parts' hashes in order, one per line), DataChunks
// (their number) and DataChecksum, the SHA-256 of the DataParts text, which pins every part through its hash.
// Parts are immutable: a reader checks each part's bytes against its name. The manager writes new parts before
// the index and deletes a part only once neither the current index nor the one before it names it.
const (
	// FormatContent is the index's DataFormat of the content-addressed layout. A gatewayd that only knows
	// Format refuses it and keeps its last good snapshot.
	FormatContent = Format + "+content"
	// DataParts lists the part hashes of a content-addressed index, one per line.
	DataParts = "parts"
	// PartPrefix starts the ConfigMap name of every content-addressed part.
	PartPrefix = IndexName + "-c-"

	// GroupsPerPart and KeysPerPart are the target numbers of items of a range: about 100 KiB and 200 KiB
	// gzip'd with the limits a group typically declares and a key's prefix and hash.
	GroupsPerPart = 1024
	KeysPerPart   = 4096
)

// PartName is the ConfigMap name of the part whose bytes hash to hash.
func PartName(hash string) string { return PartPrefix + hash }

// Part is one content-addressed piece of a snapshot.
type Part struct {
	Hash    string
	Payload []byte
}

// EncodeParts cuts s into the parts of the content-addressed layout and encodes each; the checksum is the one
// the index carries. maxBytes caps a part's payload: a range that encodes larger is halved until it fits.
func EncodeParts(s *Snapshot, maxBytes int) (parts []Part, checksum string, err error) {
	return (&PartsEncoder{}).Encode(s, maxBytes)
}

// PartsEncoder is EncodeParts with a memory of its last call: a range whose items equal, one by one, those of
// the range with the same bounds last time is not encoded again, so a change pays for encoding the ranges it
// touched and comparing the rest. Its output is exactly EncodeParts'. It holds the last snapshot's items, which
// must not be modified afterwards (the translation builds new ones every pass). Safe for one caller at a time.
type PartsEncoder struct {
	last map[rangeKey]encodedRange
	// ns is the namespace the memory was filled for: parts carry it, so they are not reused across namespaces.
	ns string
	// Encoded and Reused count the ranges of the last call that were encoded and taken from the memory.
	Encoded, Reused int
}

// rangeKey names a range by its kind and its first and last keys.
type rangeKey struct {
	groups      bool
	first, last string
	n           int
}

type encodedRange struct {
	groups []Group
	keys   []APIKey
	parts  []Part
}

// Encode is EncodeParts, reusing the ranges that did not change since the last call.
func (e *PartsEncoder) Encode(s *Snapshot, maxBytes int) (parts []Part, checksum string, err error) {
	head := *s
	head.Groups, head.APIKeys = nil, nil
	payload, sum, err := Encode(&head)
	if err != nil {
		return nil, "", err
	}
	parts = append(parts, Part{Hash: sum, Payload: payload})
	next := map[rangeKey]encodedRange{}
	e.Encoded, e.Reused = 0, 0
	// encodeRange appends the parts of mk(lo, hi), halving a range that encodes too large.
	var encodeRange func(mk func(lo, hi int) *Snapshot, lo, hi int, out *[]Part) error
	encodeRange = func(mk func(lo, hi int) *Snapshot, lo, hi int, out *[]Part) error {
		payload, sum, err := Encode(mk(lo, hi))
		if err != nil {
			return err
		}
		if len(payload) > maxBytes && hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if err := encodeRange(mk, lo, mid, out); err != nil {
				return err
			}
			return encodeRange(mk, mid, hi, out)
		}
		*out = append(*out, Part{Hash: sum, Payload: payload})
		return nil
	}
	groups := func(lo, hi int) *Snapshot { return &Snapshot{Namespace: s.Namespace, Groups: s.Groups[lo:hi]} }
	for _, r := range Ranges(len(s.Groups), func(i int) string { return s.Groups[i].ID }, GroupsPerPart) {
		items := s.Groups[r[0]:r[1]]
		k := rangeKey{groups: true, first: items[0].ID, last: items[len(items)-1].ID, n: len(items)}
		if prev, ok := e.last[k]; ok && s.Namespace == e.ns && slices.EqualFunc(prev.groups, items, func(a, b Group) bool { return a.Equal(&b) }) {
			parts = append(parts, prev.parts...)
			next[k] = prev
			e.Reused++
			continue
		}
		var out []Part
		if err := encodeRange(groups, r[0], r[1], &out); err != nil {
			return nil, "", err
		}
		parts = append(parts, out...)
		next[k] = encodedRange{groups: items, parts: out}
		e.Encoded++
	}
	keys := func(lo, hi int) *Snapshot { return &Snapshot{Namespace: s.Namespace, APIKeys: s.APIKeys[lo:hi]} }
	for _, r := range Ranges(len(s.APIKeys), func(i int) string { return s.APIKeys[i].Prefix }, KeysPerPart) {
		items := s.APIKeys[r[0]:r[1]]
		k := rangeKey{first: items[0].Prefix, last: items[len(items)-1].Prefix, n: len(items)}
		if prev, ok := e.last[k]; ok && s.Namespace == e.ns && slices.Equal(prev.keys, items) {
			parts = append(parts, prev.parts...)
			next[k] = prev
			e.Reused++
			continue
		}
		var out []Part
		if err := encodeRange(keys, r[0], r[1], &out); err != nil {
			return nil, "", err
		}
		parts = append(parts, out...)
		next[k] = encodedRange{keys: items, parts: out}
		e.Encoded++
	}
	e.last, e.ns = next, s.Namespace
	return parts, PartsChecksum(PartList(parts)), nil
}

// Ranges cuts n sorted items into [lo, hi) ranges with content-defined boundaries: a range ends after an item
// whose key's FNV-1a hash is 0 modulo target, or when it reaches 4×target items. The boundaries depend only
// on the keys, so adding or removing an item leaves every other range as it was (a forced cut at 4×target can
// move to the next natural boundary, no further).
func Ranges(n int, key func(int) string, target int) [][2]int {
	var out [][2]int
	lo := 0
	for i := range n {
		h := fnv.New64a()
		_, _ = h.Write([]byte(key(i)))
		if h.Sum64()%uint64(target) == 0 || i+1-lo >= 4*target {
			out = append(out, [2]int{lo, i + 1})
			lo = i + 1
		}
	}
	if lo < n {
		out = append(out, [2]int{lo, n})
	}
	return out
}

// PartList is the index's DataParts text for parts.
func PartList(parts []Part) string {
	hashes := make([]string, len(parts))
	for i, p := range parts {
		hashes[i] = p.Hash
	}
	return strings.Join(hashes, "\n")
}

// ParsePartList returns the hashes of a DataParts text, refusing anything but lowercase hex SHA-256s.
func ParsePartList(list string) ([]string, error) {
	if list == "" {
		return nil, errors.New("the index lists no parts")
	}
	hashes := strings.Split(list, "\n")
	for _, h := range hashes {
		if len(h) != sha256.Size*2 || strings.ToLower(h) != h {
			return nil, fmt.Errorf("part name %q is not a lowercase hex SHA-256", h)
		}
		if _, err := hex.DecodeString(h); err != nil {
			return nil, fmt.Errorf("part name %q is not a lowercase hex SHA-256", h)
		}
	}
	return hashes, nil
}

// PartsChecksum is the index's DataChecksum of a content-addressed snapshot: the SHA-256 of its DataParts.
func PartsChecksum(list string) string { return Checksum([]byte(list)) }

// DecodePart verifies payload against the hash that names it and decodes the partial snapshot.
func DecodePart(payload []byte, hash string) (*Snapshot, error) {
	s, err := Decode(payload, hash)
	if err != nil {
		return nil, fmt.Errorf("part %s: %w", hash, err)
	}
	return s, nil
}

// Merge joins decoded parts, head first, into the snapshot they were cut from. The parts are not modified.
func Merge(parts []*Snapshot) (*Snapshot, error) {
	if len(parts) == 0 {
		return nil, errors.New("no parts to merge")
	}
	out := *parts[0]
	if len(out.Groups) > 0 || len(out.APIKeys) > 0 {
		return nil, errors.New("the first part is not a head: it carries groups or keys")
	}
	var groups, keys int
	for _, p := range parts[1:] {
		groups += len(p.Groups)
		keys += len(p.APIKeys)
	}
	if groups > 0 {
		out.Groups = make([]Group, 0, groups)
	}
	if keys > 0 {
		out.APIKeys = make([]APIKey, 0, keys)
	}
	for i, p := range parts[1:] {
		if p.Namespace != out.Namespace {
			return nil, fmt.Errorf("part %d names namespace %q, the head %q", i+1, p.Namespace, out.Namespace)
		}
		out.Groups = append(out.Groups, p.Groups...)
		out.APIKeys = append(out.APIKeys, p.APIKeys...)
	}
	return &out, nil
}
