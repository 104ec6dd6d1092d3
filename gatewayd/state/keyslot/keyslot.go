// Package keyslot lays out gatewayd's Redis keys for the deployment they live on. On Redis Cluster every
// multi-key command, transaction and script must touch one hash slot, so each store wraps the part of its keys
// that a script or a transaction shares in a hash tag: the workspace's namespace for the limit counters, the
// billing events and rollups and the keys' last uses, one tag for the whole async queue (see docs/decisions.md,
// "Redis Cluster and Sentinel"). On standalone Redis and Sentinel (one primary) the keys carry no tag and stay
// those of earlier releases, so an upgrade keeps today's data.
package keyslot

import "github.com/redis/go-redis/v9"

// Clustered reports whether c is a Redis Cluster client, whose keys need hash tags.
func Clustered(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

// Tag returns s as a hash tag ("{s}") when clustered, and s itself otherwise.
func Tag(clustered bool, s string) string {
	if clustered {
		return "{" + s + "}"
	}
	return s
}
