// Package redisclient builds the go-redis client of each Redis deployment gatewayd runs on (a standalone server,
// Sentinel's failover client, the cluster client) and lays keys out for it. On Redis Cluster every multi-key
// command, transaction and script must stay in one hash slot, so each store wraps the part of its keys that a
// script or a transaction shares in a hash tag: the workspace's namespace for the limit counters, the billing
// events and rollups and the keys' last uses, one tag for the whole async queue (see docs/decisions.md,
// "Redis Cluster and Sentinel"). On standalone Redis and Sentinel (one primary) the keys carry no tag and stay
// those of earlier releases, so an upgrade keeps today's data. Check tells credentials a server refuses (which stop
// the start) from a Redis that does not answer yet; Wait makes a write wait for replicas on the connection that
// made it.
package redisclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// The deployments, as --redis-mode names them.
const (
	Standalone = "standalone"
	Sentinel   = "sentinel"
	Cluster    = "cluster"
)

// ClusterStateReload is how stale a cluster client's slot map may get. go-redis reloads it at once on MOVED and
// ASK, but not when a primary stops answering: until the map is reloaded, calls of that primary's slots keep
// dialing the dead node after its replica took over. Its default, a minute, is a minute of failed calls; a
// reload is one CLUSTER SLOTS, off the calls' path.
const ClusterStateReload = time.Second

// Options reach one deployment.
type Options struct {
	// Mode is Standalone, Sentinel or Cluster.
	Mode string
	// URL reaches a standalone server (redis:// or rediss://, may carry a username and password).
	URL string
	// Addrs are the sentinels (Sentinel) or some nodes of the cluster (Cluster), host:port each.
	Addrs []string
	// MasterName is the name the sentinels know the primary by.
	MasterName string
	// Username and Password authenticate to the data nodes (for Standalone, when the URL carries none).
	Username, Password string
	// SentinelPassword authenticates to the sentinels, when they ask for one.
	SentinelPassword string
	// TLS dials the nodes and sentinels over TLS (for Standalone, rediss:// says so).
	TLS bool
	// TLSCAFile is a PEM file of the CAs that sign the servers' certificates, for a Redis whose CA is not one of
	// the system's (a provider's own, or a cluster's internal CA); empty trusts the system's roots.
	TLSCAFile string
}

// ErrCAFile wraps a TLSCAFile that cannot be read or holds no certificate.
var ErrCAFile = errors.New("no CA certificates")

// New returns the client of o's deployment. o must name a known mode; a standalone URL that does not parse and a
// CA file that does not load are errors (the latter wraps ErrCAFile).
func New(o Options) (redis.UniversalClient, error) {
	roots, err := caPool(o)
	if err != nil {
		return nil, err
	}
	tc, err := tlsConfig(o)
	if err != nil {
		return nil, err
	}
	switch o.Mode {
	case Sentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: o.MasterName, SentinelAddrs: o.Addrs,
			Username: o.Username, Password: o.Password, SentinelPassword: o.SentinelPassword, TLSConfig: tc}), nil
	case Cluster:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.Addrs, Username: o.Username, Password: o.Password,
			TLSConfig: tc, ClusterStateReloadInterval: ClusterStateReload}), nil
	}
	ro, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, err
	}
	if ro.Username == "" && ro.Password == "" {
		ro.Username, ro.Password = o.Username, o.Password
	}
	if ro.TLSConfig != nil {
		ro.TLSConfig.RootCAs = roots
	}
	return redis.NewClient(ro), nil
}

// caPool is the pool of o's CA file; nil (the system's roots) without one.
func caPool(o Options) (*x509.CertPool, error) {
	if o.TLSCAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(o.TLSCAFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCAFile, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w in %s", ErrCAFile, o.TLSCAFile)
	}
	return roots, nil
}

// tlsConfig is the TLS configuration of the sentinels and nodes of o; nil without TLS (Options.TLS).
func tlsConfig(o Options) (*tls.Config, error) {
	if !o.TLS {
		return nil, nil
	}
	roots, err := caPool(o)
	if err != nil {
		return nil, err
	}
	// The server name is the host dialed, which crypto/tls takes when none is set.
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}, nil
}

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
