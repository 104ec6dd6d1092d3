package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
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
	// ClaimKindKeyName is the kind of a WorkspaceAPIKey's name claim (its value: WorkspaceAPIKey.NameClaim). The
	// key reconciler deletes one once no key holds it (controllers/gateway KeyNameClaimReconciler).
	ClaimKindKeyName = "key-name"

	// ClaimDataValue is the value claimed.
	ClaimDataValue = "value"
	// ClaimDataHolderKind, ClaimDataHolderName and ClaimDataHolderUID name the object that holds the claim.
	ClaimDataHolderKind = "holderKind"
	ClaimDataHolderName = "holderName"
	ClaimDataHolderUID  = "holderUID"
	// ClaimDataClaimedAt is when the holder took the claim (RFC 3339): a create, a take-over, or the holder taking
	// it again. An admission in flight has claimed before its object is stored, so a claim whose holder does not
	// exist is left alone until ClaimGrace has passed since then.
	ClaimDataClaimedAt = "claimedAt"
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

// ClaimGrace is how long a claim whose holder does not exist (or does not hold it) is kept for an admission in
// flight: longer than the webhook timeout.
const ClaimGrace = 30 * time.Second

// ClaimedAt is when the holder of a claim with data took it; created, the claim's creation time, for a claim
// written before claims were stamped.
func ClaimedAt(data map[string]string, created time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, data[ClaimDataClaimedAt]); err == nil {
		return t
	}
	return created
}

// ClaimRevoked reports whether the data of a claim ConfigMap marks it revoked.
func ClaimRevoked(data map[string]string) bool { return data[ClaimDataRevoked] == "true" }

// ReasonPrefixRevoked is the Ready=False reason of a key whose Secret holds a key whose prefix was revoked.
const ReasonPrefixRevoked = "PrefixRevoked"
