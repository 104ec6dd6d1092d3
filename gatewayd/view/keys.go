package view

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"

	"github.com/modelgate/modelgate/api/snapshot"
)

// Federated keys are the bulk of a large workspace (a million keys for a hundred thousand groups), so they are
// held compactly: by value in blocks, one block per content-addressed part, each key's ID and prefix cut from one
// string per block and its hash as 32 bytes, and found through one open-addressing table of small entries across
// namespaces rather than a map of pointers. A load reuses the blocks of the parts that did not change, and the
// table too when no key moved.

// maxBlockKeys bounds a block, so a key's position fits in 16 bits. A content-addressed part holds at most
// 4×snapshot.KeysPerPart keys.
const maxBlockKeys = 1 << 16

// keyBlock is the federated keys of one part, by value.
type keyBlock struct {
	// hash names the content-addressed part the keys come from; empty for a snapshot loaded whole.
	hash string
	keys []Key
}

// KeyPart is the federated keys of one part of a snapshot, decoded (Keys), compacted (CompactKeyPart), or
// neither when the part is one of the namespace being served (HasKeyPart): its block is then reused without
// being decoded again.
type KeyPart struct {
	// Hash names the content-addressed part; empty for the keys of a snapshot loaded whole.
	Hash string
	Keys []snapshot.APIKey
	// compact is the part's keys already in their compact form (CompactKeyPart), waiting for their groups.
	compact *compactKeys
}

// compactKeys is a block whose keys do not point at their groups yet, with the group ID of each key.
type compactKeys struct {
	block  *keyBlock
	groups []string
}

// CompactKeyPart turns the decoded keys of the part named hash into their compact form, checking each key's prefix
// and hash; BuildParts resolves their groups. A gatewayd does not load parts this way: it parses their keys
// straight into a KeyPartBuilder (reload.DecodeParts), which must build what CompactKeyPart builds from the same
// keys, and the tests hold it to that.
func CompactKeyPart(hash string, keys []snapshot.APIKey) (KeyPart, error) {
	c, err := compact(hash, keys)
	if err != nil {
		return KeyPart{}, err
	}
	return KeyPart{Hash: hash, compact: c}, nil
}

// KeyPartBuilder is CompactKeyPart for keys that come one at a time, as snapshot.DecodePartKeys parses them
// (Add is a snapshot.KeySink): no decoded record of a key is ever allocated.
type KeyPartBuilder struct {
	b *keyBuilder
}

// NewKeyPartBuilder returns a builder of the keys of the part named hash.
func NewKeyPartBuilder(hash string) *KeyPartBuilder {
	return &KeyPartBuilder{b: newKeyBuilder(hash)}
}

// Add checks one key's prefix and hash and appends it.
func (b *KeyPartBuilder) Add(id, prefix, hash, groupID []byte) error {
	return addKey(b.b, id, prefix, hash, groupID)
}

// Len is the number of keys added.
func (b *KeyPartBuilder) Len() int { return len(b.b.keys) }

// Part is the compact form of the keys added. The builder is not used afterwards.
func (b *KeyPartBuilder) Part() KeyPart {
	return KeyPart{Hash: b.b.hash, compact: b.b.finish()}
}

// HasKeyPart reports whether ns holds the keys of the content-addressed part named hash, so that a load can pass
// that part as a KeyPart without its keys.
func (ns *Namespace) HasKeyPart(hash string) bool {
	_, ok := ns.keyParts[hash]
	return ok
}

// keyAt is the key at pos, a block index and an offset in it.
func (ns *Namespace) keyAt(pos uint32) *Key { return &ns.keyBlocks[pos>>16].keys[pos&0xffff] }

// eachKey calls f with every federated key of ns.
func (ns *Namespace) eachKey(f func(*Key)) {
	for _, b := range ns.keyBlocks {
		for i := range b.keys {
			f(&b.keys[i])
		}
	}
}

// wholeKeyParts cuts the keys of a snapshot loaded whole into parts of at most maxBlockKeys.
func wholeKeyParts(keys []snapshot.APIKey) []KeyPart {
	var out []KeyPart
	for len(keys) > 0 {
		n := min(len(keys), maxBlockKeys)
		out = append(out, KeyPart{Keys: keys[:n]})
		keys = keys[n:]
	}
	return out
}

// newKeyBlock resolves the keys of p against the groups of ns.
func newKeyBlock(ns *Namespace, p KeyPart) (*keyBlock, error) {
	c := p.compact
	if c == nil {
		var err error
		if c, err = compact(p.Hash, p.Keys); err != nil {
			return nil, err
		}
	}
	for i := range c.block.keys {
		k := &c.block.keys[i]
		if k.Group = ns.Groups[c.groups[i]]; k.Group == nil {
			return nil, fmt.Errorf("apiKeys[%s].groupID: group %q is not in the snapshot", k.ID, c.groups[i])
		}
	}
	return c.block, nil
}

// compact checks decoded keys and copies them into a block, IDs and prefixes into one string, so that the block
// keeps none of the decoded records alive.
func compact(hash string, keys []snapshot.APIKey) (*compactKeys, error) {
	if len(keys) > maxBlockKeys {
		return nil, fmt.Errorf("part %s holds %d keys, more than %d", hash, len(keys), maxBlockKeys)
	}
	b := newKeyBuilder(hash)
	for i := range keys {
		k := &keys[i]
		if err := addKey(b, k.ID, k.Prefix, k.Hash, k.GroupID); err != nil {
			return nil, err
		}
	}
	return b.finish(), nil
}

// keyBuilder collects the keys of one block: each key's hash, its ID and prefix in text, its group ID in
// groupText, and where each ends (ends: the ID's in text and the group ID's in groupText, per key). finish
// copies them into a block of their size, and cuts the strings from one string per text. Its memory is reused
// from block to block: a start builds hundreds.
type keyBuilder struct {
	hash            string
	keys            []Key
	text, groupText []byte
	ends            []uint32
}

var keyBuilders = sync.Pool{New: func() any { return new(keyBuilder) }}

func newKeyBuilder(hash string) *keyBuilder {
	b := keyBuilders.Get().(*keyBuilder)
	b.hash, b.keys, b.text, b.groupText, b.ends = hash, b.keys[:0], b.text[:0], b.groupText[:0], b.ends[:0]
	return b
}

// addKey checks one key's prefix and hash and appends it to b.
func addKey[T string | []byte](b *keyBuilder, id, prefix, hash, groupID T) error {
	if len(b.keys) == maxBlockKeys {
		return fmt.Errorf("part %s holds more than %d keys", b.hash, maxBlockKeys)
	}
	b.keys = append(b.keys, Key{})
	if err := parseKeyInto(&b.keys[len(b.keys)-1].Hash, prefix, hash); err != nil {
		return fmt.Errorf("apiKeys[%s]: %w", id, err)
	}
	b.text = append(append(b.text, id...), prefix...)
	b.groupText = append(b.groupText, groupID...)
	b.ends = append(b.ends, uint32(len(b.text)-len(prefix)), uint32(len(b.groupText)))
	return nil
}

// finish returns the keys of b as a block, and b to the pool: b is not used afterwards. The keys of b hold no
// strings yet, so the pool keeps nothing of the block alive.
func (b *keyBuilder) finish() *compactKeys {
	keys := slices.Clone(b.keys)
	c := &compactKeys{block: &keyBlock{hash: b.hash, keys: keys}, groups: make([]string, len(keys))}
	text, groupText := string(b.text), string(b.groupText)
	at, gat := uint32(0), uint32(0)
	for i := range keys {
		idEnd, gEnd := b.ends[2*i], b.ends[2*i+1]
		keys[i].ID, keys[i].Prefix = text[at:idEnd], text[idEnd:idEnd+PrefixLen]
		c.groups[i] = groupText[gat:gEnd]
		at, gat = idEnd+PrefixLen, gEnd
	}
	keyBuilders.Put(b)
	return c
}

// rebound is old with every key of a moved group pointing at the group of the same ID in ns, or old itself when
// none of its keys' groups moved. Keys whose group moved lose their shared plans, which bindShared binds again.
func rebound(ns *Namespace, old *keyBlock, moved map[*Group]bool) (*keyBlock, error) {
	if len(moved) == 0 {
		return old, nil
	}
	var b *keyBlock
	for i := range old.keys {
		if !moved[old.keys[i].Group] {
			continue
		}
		if b == nil {
			b = &keyBlock{hash: old.hash, keys: append([]Key(nil), old.keys...)}
		}
		k := &b.keys[i]
		g := ns.Groups[k.Group.ID]
		if g == nil {
			return nil, fmt.Errorf("apiKeys[%s].groupID: group %q is not in the snapshot", k.ID, k.Group.ID)
		}
		k.Group, k.Shared = g, nil
	}
	if b == nil {
		return old, nil
	}
	return b, nil
}

// sameKeyPositions reports whether a and b hold keys of the same prefixes at the same positions.
func sameKeyPositions(a, b []*keyBlock) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] == b[i] || (a[i].hash != "" && a[i].hash == b[i].hash) {
			continue
		}
		if len(a[i].keys) != len(b[i].keys) {
			return false
		}
		for j := range a[i].keys {
			if a[i].keys[j].Prefix != b[i].keys[j].Prefix {
				return false
			}
		}
	}
	return true
}

// keyIndex finds federated keys by prefix across namespaces: open addressing with linear probing over entries
// of 12 bytes, at most half full. Each entry names a namespace slot of the View (1-based; 0 is empty) and a key's
// position in it, with 32 bits of the prefix's hash to skip most other prefixes without reading the key. The
// hash is seeded per index, so prefixes cannot be chosen to collide.
type keyIndex struct {
	seed    maphash.Seed
	mask    uint64
	entries []keyEntry
}

type keyEntry struct {
	tag, slot, pos uint32
}

func (ix *keyIndex) hash(prefix string) uint64 { return maphash.String(ix.seed, prefix) }

// newKeyIndex indexes the federated keys of slots.
func newKeyIndex(slots []*Namespace) *keyIndex {
	n := 0
	for _, ns := range slots {
		for _, b := range ns.keyBlocks {
			n += len(b.keys)
		}
	}
	size := uint64(1) << bits.Len(uint(2*n))
	ix := &keyIndex{seed: maphash.MakeSeed(), mask: size - 1, entries: make([]keyEntry, size)}
	for s, ns := range slots {
		for bi, b := range ns.keyBlocks {
			for ki := range b.keys {
				h := ix.hash(b.keys[ki].Prefix)
				i := h & ix.mask
				for ix.entries[i].slot != 0 {
					i = (i + 1) & ix.mask
				}
				ix.entries[i] = keyEntry{tag: uint32(h >> 32), slot: uint32(s + 1), pos: uint32(bi)<<16 | uint32(ki)}
			}
		}
	}
	return ix
}

// sameSharedState reports whether what the shared model API plans of a key depend on, besides its group and
// prefix, is as in prev: the tier and which slugs are shared.
func sameSharedState(ns, prev *Namespace, s *snapshot.Snapshot) bool {
	if prev == nil || prev.Snapshot == nil || !equalTier(tierOf(prev.Snapshot), tierOf(s)) {
		return false
	}
	for slug := range ns.Endpoints {
		if isShared(ns, slug) != isShared(prev, slug) {
			return false
		}
	}
	for slug := range prev.Endpoints {
		if isShared(ns, slug) != isShared(prev, slug) {
			return false
		}
	}
	return true
}

func equalTier(a, b []int64) bool {
	return len(a) == len(b) && (len(a) == 0 || (a[0] == b[0] && a[1] == b[1]))
}
