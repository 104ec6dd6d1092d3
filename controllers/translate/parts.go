package translate

import (
	"slices"
	"sort"

	"github.com/modelgate/modelgate/api/snapshot"
)

// partsMemory is what EncodeParts keeps from its last call: the parts of each range, and the sort keys (group
// ids, key prefixes) that the passes since then dropped from or added to the lists.
type partsMemory struct {
	maxBytes     int
	ranges       map[partsRange][]snapshot.Part
	groups, keys map[string]bool
}

// partsRange names a range by its kind and its first and last sort keys.
type partsRange struct {
	groups      bool
	first, last string
	n           int
}

// EncodeParts returns snapshot.EncodeParts(s, maxBytes) for s, the snapshot of this Translator's last pass.
// Like snapshot.PartsEncoder it reuses the parts of a range with the same bounds as in its last call, but it
// knows which sort keys the passes since then touched, so it reuses a range none of them falls in without
// comparing its items: a change pays for the ranges it touched, and for cutting the lists into ranges. Given
// any other snapshot it encodes every range and forgets its memory; given another maxBytes, it encodes every
// range.
func (t *Translator) EncodeParts(s *snapshot.Snapshot, maxBytes int) (parts []snapshot.Part, checksum string, err error) {
	head := *s
	head.Groups, head.APIKeys = nil, nil
	payload, sum, err := snapshot.Encode(&head)
	if err != nil {
		return nil, "", err
	}
	parts = append(parts, snapshot.Part{Hash: sum, Payload: payload})
	// Only the lists of the last pass are what the memory and the touched keys describe.
	remember := t.lastPass(s)
	last := t.parts
	if last == nil || last.maxBytes != maxBytes || !remember {
		last = &partsMemory{}
	}
	next := &partsMemory{maxBytes: maxBytes, ranges: map[partsRange][]snapshot.Part{}, groups: map[string]bool{}, keys: map[string]bool{}}
	t.PartsEncoded, t.PartsReused = 0, 0
	// encode appends the parts of the range, reused or encoded, halving a range that encodes too large.
	encode := func(k partsRange, touched []string, mk func(lo, hi int) *snapshot.Snapshot, lo, hi int) error {
		if prev, ok := last.ranges[k]; ok && !within(touched, k.first, k.last) {
			parts = append(parts, prev...)
			next.ranges[k] = prev
			t.PartsReused++
			return nil
		}
		from := len(parts)
		var halve func(lo, hi int) error
		halve = func(lo, hi int) error {
			payload, sum, err := snapshot.Encode(mk(lo, hi))
			if err != nil {
				return err
			}
			if len(payload) > maxBytes && hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if err := halve(lo, mid); err != nil {
					return err
				}
				return halve(mid, hi)
			}
			parts = append(parts, snapshot.Part{Hash: sum, Payload: payload})
			return nil
		}
		if err := halve(lo, hi); err != nil {
			return err
		}
		next.ranges[k] = slices.Clip(parts[from:])
		t.PartsEncoded++
		return nil
	}

	touched := sortedKeys(last.groups)
	groups := func(lo, hi int) *snapshot.Snapshot {
		return &snapshot.Snapshot{Namespace: s.Namespace, Groups: s.Groups[lo:hi]}
	}
	for _, r := range snapshot.Ranges(len(s.Groups), func(i int) string { return s.Groups[i].ID }, snapshot.GroupsPerPart) {
		k := partsRange{groups: true, first: s.Groups[r[0]].ID, last: s.Groups[r[1]-1].ID, n: r[1] - r[0]}
		if err := encode(k, touched, groups, r[0], r[1]); err != nil {
			return nil, "", err
		}
	}
	touched = sortedKeys(last.keys)
	keys := func(lo, hi int) *snapshot.Snapshot {
		return &snapshot.Snapshot{Namespace: s.Namespace, APIKeys: s.APIKeys[lo:hi]}
	}
	for _, r := range snapshot.Ranges(len(s.APIKeys), func(i int) string { return s.APIKeys[i].Prefix }, snapshot.KeysPerPart) {
		k := partsRange{first: s.APIKeys[r[0]].Prefix, last: s.APIKeys[r[1]-1].Prefix, n: r[1] - r[0]}
		if err := encode(k, touched, keys, r[0], r[1]); err != nil {
			return nil, "", err
		}
	}
	t.parts = nil
	if remember {
		t.parts = next
	}
	return parts, snapshot.PartsChecksum(snapshot.PartList(parts)), nil
}

// ForgetParts drops what EncodeParts keeps, for a workspace that went back to the inline layout: the next
// EncodeParts encodes every range.
func (t *Translator) ForgetParts() { t.parts = nil }

// lastPass reports whether s carries the lists of the Translator's last pass.
func (t *Translator) lastPass(s *snapshot.Snapshot) bool {
	return s.Namespace == t.ns && sameList(s.Groups, t.outGroups) && sameList(s.APIKeys, t.outKeys)
}

func sameList[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// touch records sort keys a pass dropped or added, while EncodeParts has a memory to check them against.
func (t *Translator) touch(groups bool, drop map[string]bool, added func(yield func(string) bool)) {
	if t.parts == nil {
		return
	}
	into := t.parts.keys
	if groups {
		into = t.parts.groups
	}
	for k := range drop {
		into[k] = true
	}
	for k := range added {
		into[k] = true
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// within reports whether a sorted key falls in [first, last].
func within(sorted []string, first, last string) bool {
	i := sort.SearchStrings(sorted, first)
	return i < len(sorted) && sorted[i] <= last
}
