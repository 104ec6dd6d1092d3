package state

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

// restartLimit is the REQUEST DAY limit of the restart tests: high enough that the stop lands mid-load.
const restartLimit = 1000

// testRestartKeepsCounters loads a gatewayd whose key has a REQUEST DAY limit of restartLimit, stops it with
// sig while calls are in flight, restarts it on the same state and checks how many calls are left. A call
// counts as admitted when its client saw 200; graceful shutdown finishes every admitted call, so after SIGTERM
// exactly restartLimit minus the admitted calls remain. maxLoss is how many admitted calls the restart may
// forget.
func testRestartKeepsCounters(t *testing.T, w *workspace, sig syscall.Signal, maxLoss int, flags ...string) (admitted, left int) {
	t.Helper()
	key := []string{w.keys["acme"]}
	g := startGatewayd(t, w.ns, flags...)
	first := hammer(30, []string{g.url}, key)
	// Keep calls flowing while the signal lands.
	done := make(chan *tally)
	go func() {
		var all tally
		for i := 0; g.alive() && i < restartLimit; i++ {
			all.add(chat(g.url, key[0]))
		}
		done <- &all
	}()
	time.Sleep(100 * time.Millisecond)
	g.signal(sig)
	during := <-done
	admitted = first.get(http.StatusOK) + during.get(http.StatusOK)
	if admitted < 30 || admitted >= restartLimit {
		t.Fatalf("admitted %d before the stop, want the stop to land before the limit (30..%d)", admitted, restartLimit-1)
	}
	g = startGatewayd(t, w.ns, flags...)
	after := hammer(restartLimit+50, []string{g.url}, key)
	left = after.get(http.StatusOK)
	lost := admitted + left - restartLimit
	t.Logf("Admitted %d before %v, %d after the restart: %d forgotten", admitted, sig, left, lost)
	if lost < 0 || lost > maxLoss {
		t.Fatalf("after %v and restart %d calls were admitted on top of %d, want %d..%d (limit - admitted + up to %d lost)",
			sig, left, admitted, restartLimit-admitted, restartLimit-admitted+maxLoss, maxLoss)
	}
	return admitted, left
}

// TestEmbeddedSIGTERMKeepsCounters: the embedded store flushes on SIGTERM, so a restart loses nothing.
func TestEmbeddedSIGTERMKeepsCounters(t *testing.T) {
	w := newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"), []gatewaytest.Group{{ID: "acme", Models: usageLimited(restartLimit)}}, nil)
	// A long flush interval, so only the shutdown flush can have saved the counts.
	testRestartKeepsCounters(t, w, syscall.SIGTERM, 0, "--store=embedded", "--state-dir="+t.TempDir(), "--flush-interval=1h")
}

// TestEmbeddedSIGKILLLosesAtMostOneInterval: after a SIGKILL the restart forgets at most the calls admitted in
// the last flush interval. The calls before the last quiet second are all kept; only the burst right before
// the kill may be lost.
func TestEmbeddedSIGKILLLosesAtMostOneInterval(t *testing.T) {
	w := newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"), []gatewaytest.Group{{ID: "acme", Models: usageLimited(100)}}, nil)
	dir := t.TempDir()
	flags := []string{"--store=embedded", "--state-dir=" + dir, "--flush-interval=100ms"}
	key := []string{w.keys["acme"]}
	g := startGatewayd(t, w.ns, flags...)
	settled := hammer(40, []string{g.url}, key).get(http.StatusOK)
	time.Sleep(time.Second) // ten intervals: these 40 are surely on disk
	burst := hammer(20, []string{g.url}, key).get(http.StatusOK)
	g.signal(syscall.SIGKILL)
	if settled != 40 || burst != 20 {
		t.Fatalf("admitted %d then %d, want 40 then 20", settled, burst)
	}
	g = startGatewayd(t, w.ns, flags...)
	left := hammer(150, []string{g.url}, key).get(http.StatusOK)
	lost := 60 + left - 100
	t.Logf("SIGKILL after a burst of %d calls: %d forgotten", burst, lost)
	if lost < 0 || lost > burst {
		t.Fatalf("after SIGKILL %d calls were admitted on top of 60, want %d..%d: only the last interval's calls may be lost",
			left, 40, 40+burst)
	}
}
