package v1alpha1

import (
	"crypto/sha256"
	"fmt"
)

// Revocation records (docs/decisions.md "Uniqueness and duplicates"): a revoked key prefix is kept, with the
// key's hash, in one of RevokedShards ConfigMaps of its workspace, chosen by the prefix, rather than in a
// ConfigMap of its own, so deleting a group of many keys adds at most RevokedShards objects to the workspace,
// ever. A record stays for good: a revoked key never authenticates again.

// RevokedShards is the number of ConfigMaps a workspace's revocation records are spread over.
const RevokedShards = 16

// RevokedShardName is the name of the ConfigMap that holds the revocation record of prefix; its data maps each
// revoked prefix of the shard to its key's hash.
func RevokedShardName(prefix string) string {
	sum := sha256.Sum256([]byte(prefix))
	return fmt.Sprintf("modelgate-revoked-%02d", int(sum[0])%RevokedShards)
}
