package redistest

import (
	"context"
	"testing"
)

// TestDeploymentsServe: each deployment answers a write and a read through the client gatewayd would build.
func TestDeploymentsServe(t *testing.T) {
	Each(t, func(t *testing.T, d *Deployment) {
		c := d.Client()
		ctx := context.Background()
		for _, k := range []string{"a", "b", "c", "d"} {
			if err := c.Set(ctx, k, k, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, k).Result(); err != nil || v != k {
				t.Fatalf("get %s: %q, %v", k, v, err)
			}
		}
	})
}
