package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
)

// Claims are ConfigMaps that make a value unique within a workspace (the admission webhooks take them; see
// webhooks/claims.go). A key prefix claim outlives its key: deleting a key with a prefix in its spec marks the
// claim revoked, a tombstone holding the key's hash, and no key of any source (spec, secretRef, minted) is served
// under that prefix again: the webhooks refuse it at admission and the key reconcilers refuse to derive it
// (docs/security.md "Revocation covers every key source").
const (
	// LabelClaim marks claim ConfigMaps; its value is the kind of value claimed.
	LabelClaim = "gateway.modelgate.io/claim"
	// ClaimKindKeyPrefix is the kind of a key prefix claim.
	ClaimKindKeyPrefix = "key-prefix"
	// ClaimDataRevoked is "true" in a revoked key prefix claim.
	ClaimDataRevoked = "revoked"
	// ClaimDataHash holds the revoked key's hash in a revoked key prefix claim.
	ClaimDataHash = "hash"
)

// ClaimName is the name of the ConfigMap that claims value of kind: the hash keeps any value a valid name.
func ClaimName(kind, value string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + value))
	return "modelgate-claim-" + hex.EncodeToString(sum[:20])
}

// ClaimRevoked reports whether the data of a claim ConfigMap marks it revoked.
func ClaimRevoked(data map[string]string) bool { return data[ClaimDataRevoked] == "true" }

// ReasonPrefixRevoked is the Ready=False reason of a key whose Secret holds a key whose prefix was revoked.
const ReasonPrefixRevoked = "PrefixRevoked"
