// Package apikey defines the format of modelgate API keys, federated and workspace alike: how a key is minted,
// the prefix it is found by, and the only form in which it is stored. The manager, the REST API, gatewayd and
// the test stacks all use it, so the format cannot drift between the place that mints a key and the place that
// checks it.
package apikey

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"

	"github.com/modelgate/modelgate/api/ids"
)

var (
	// Federated starts the prefix of minted federated keys (ids.FederatedKey).
	Federated = ids.FederatedKey.Prefix
	// Workspace starts the prefix of minted workspace keys (ids.WorkspaceKey).
	Workspace = ids.WorkspaceKey.Prefix
	// SecretLen is the number of random base62 characters after the dot of a minted key (ids.KeySecret).
	SecretLen = ids.KeySecret.Len
)

const (
	// PrefixLen is the length of the lookup prefix of every key: its first 16 characters.
	PrefixLen = 16

	// MinRegisteredLen and MaxRegisteredLen bound a key registered by its owner.
	MinRegisteredLen = 32
	MaxRegisteredLen = 128
	// MinEntropy is the least Shannon entropy, in bits per character, of a registered key.
	MinEntropy = 3.0
)

// Mint returns a new key "<kind><random>.<secret>": kind (Federated or Workspace) plus random base62 characters
// make the 16-character prefix (ids.FederatedKey, ids.WorkspaceKey), and the secret is ids.KeySecret, SecretLen
// base62 characters from crypto/rand (about 190 bits).
func Mint(kind string) (string, error) {
	if len(kind) >= PrefixLen {
		return "", fmt.Errorf("key kind %q leaves no room for random prefix characters", kind)
	}
	prefix := ids.Kind{Prefix: kind, Alphabet: ids.Base62, Len: PrefixLen - len(kind)}
	return ids.New(prefix) + "." + ids.New(ids.KeySecret), nil
}

// Prefix is the lookup prefix of any key, minted or registered: its first PrefixLen characters, or the whole key
// when it is shorter.
func Prefix(key string) string {
	if len(key) < PrefixLen {
		return key
	}
	return key[:PrefixLen]
}

// Hash is the lowercase hex SHA-256 of the whole key, the only form in which a key is stored.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Entropy is the Shannon entropy of s in bits per character, 0 for an empty string.
func Entropy(s string) float64 {
	counts := map[rune]int{}
	n := 0
	for _, r := range s {
		counts[r]++
		n++
	}
	h := 0.0
	for _, c := range counts {
		p := float64(c) / float64(n)
		h -= p * math.Log2(p)
	}
	return h
}
