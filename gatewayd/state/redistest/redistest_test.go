package redistest

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestDeploymentsServe: each deployment answers a write and a read through the client gatewayd would build.
func TestDeploymentsServe(t *testing.T) {
	Each(t, func(t *testing.T, d *Deployment) { writeAndRead(t, d.Client()) })
}

// TestSecuredDeploymentsServe: a Sentinel setup and a cluster that ask for a password (with an ACL user) on their
// data nodes, another on the sentinels, and serve TLS only, answer the client gatewayd builds from their
// Options, and refuse one without the password or without TLS.
func TestSecuredDeploymentsServe(t *testing.T) {
	sec := Security{Username: "gatewayd", Password: "data-s3cret", SentinelPassword: "sentinel-s3cret", TLS: true}
	for _, mode := range []string{Sentinel, Cluster} {
		t.Run(mode, func(t *testing.T) {
			d := StartSecured(t, mode, sec)
			writeAndRead(t, d.Client())
			ctx := context.Background()
			plain := redis.NewClient(&redis.Options{Addr: d.Nodes[0].Addr(), MaxRetries: -1})
			defer plain.Close()
			if err := plain.Ping(ctx).Err(); err == nil {
				t.Error("a node answered a client without TLS")
			}
			noPassword := d.Nodes[0].options()
			noPassword.Username, noPassword.Password, noPassword.MaxRetries = "", "", -1
			c := redis.NewClient(noPassword)
			defer c.Close()
			if err := c.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
				t.Errorf("a node answered a client without the password: %v", err)
			}
			if mode == Sentinel {
				o := d.Sentinels[0].options()
				o.Password, o.MaxRetries = "", -1
				s := redis.NewSentinelClient(o)
				defer s.Close()
				if err := s.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
					t.Errorf("a sentinel answered a client without its password: %v", err)
				}
			}
		})
	}
}

func writeAndRead(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(ctx, k).Result(); err != nil || v != k {
			t.Fatalf("get %s: %q, %v", k, v, err)
		}
	}
}
