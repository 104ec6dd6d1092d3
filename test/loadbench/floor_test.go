package loadbench

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
)

// TestFloorsProxyCorrectly starts each floor proxy as the harness does, in its own process in front of the fake
// upstreams, and drives it with the harness's checks: every plain answer and every stream (its chunk count and
// its usage) arrives as the upstream sent it, or the floor's figures would not be worth comparing.
func TestFloorsProxyCorrectly(t *testing.T) {
	cfg := QuickConfig()
	cfg.Log = testr.New(t)
	u, err := startUpstreams(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := expect(cfg)
	for _, server := range floors {
		t.Run(server, func(t *testing.T) {
			c, err := startFloor(ctx, server, u)
			if err != nil {
				t.Fatal(err)
			}
			defer c.stop()
			plain, stream := floorTargets(c, server)
			var v Violations
			p := Drive(ctx, plain, 4, 200*time.Millisecond, false, want, &v)
			s := Drive(ctx, stream, 2, 50*time.Millisecond, true, want, &v)
			if v.Total() > 0 {
				t.Fatalf("violations through %s: %s %v", floorName(server), v.String(), v.Examples())
			}
			if p.Requests == 0 || s.Requests == 0 {
				t.Errorf("%s answered %d plain calls and %d streams, want some of each", floorName(server), p.Requests, s.Requests)
			}
		})
	}
}
