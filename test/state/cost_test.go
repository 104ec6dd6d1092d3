package state

import (
	"context"
	byteorder "encoding/binary"
	"encoding/json"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// costBudget is the COST MONTH limit of the tests below, $0.20 in micro-USD; at 1,000 USD per million tokens a
// call of the echo upstream costs a few thousand micro-USD, so the budget is spent within the first few dozen calls.
const costBudget = 200_000

// pricedWorkspace is a workspace whose one group, acme, has a COST MONTH budget on the echo Endpoint, priced.
func pricedWorkspace(t *testing.T) *workspace {
	return newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"),
		[]gatewaytest.Group{{ID: "acme", Models: []gatewayv1.ModelConfig{{Slug: slug, UsageLimits: []gatewayv1.Limit{{Type: "COST", Unit: "MONTH", Threshold: costBudget}}}}}},
		func(s *snapshot.Snapshot) {
			s.Endpoints[0].Targets[0].Pricing = &snapshot.Pricing{InputPerMillionTokens: "1000", OutputPerMillionTokens: "1000"}
		})
}

// eventCosts reads every billing event through GET /v1/gateway/events of base, waiting until there are n, and
// returns the sum of costMicroUsd, the most one call cost and the count of answered (200) calls.
func eventCosts(t *testing.T, base string, w *workspace, n int) (sum, most int64, answered int) {
	t.Helper()
	type event struct {
		StatusCode   int   `json:"statusCode"`
		CostMicroUsd int64 `json:"costMicroUsd"`
	}
	var items []event
	for range 200 {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/gateway/events?limit=1000", nil)
		req.Header.Set("Authorization", "Bearer "+w.admin)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Items []event `json:"items"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if items = page.Items; len(items) >= n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(items) != n {
		t.Fatalf("%d billing events, want %d", len(items), n)
	}
	for _, e := range items {
		sum += e.CostMicroUsd
		most = max(most, e.CostMicroUsd)
		if e.StatusCode == http.StatusOK {
			answered++
		}
	}
	return sum, most, answered
}

// checkCostRun checks a run of 1,000 concurrent calls against the budget: every call answered 200 or 429
// usage_limit_exceeded, the 200s are the events' answered calls, the counter is exactly the events' cost sum,
// and it passed the budget by less than the calls in flight can cost (docs/limits.md, "Overshoot of TOKEN and
// COST"): at most 1,000 calls of the most one call cost.
func checkCostRun(t *testing.T, c *tally, counter, sum, most int64, answered int) {
	t.Helper()
	if c.get(http.StatusOK)+c.codes["usage_limit_exceeded"] != 1000 {
		t.Fatalf("answers %v (codes %v), want only 200 and 429 usage_limit_exceeded", c.by, c.codes)
	}
	if c.get(http.StatusOK) != answered {
		t.Errorf("%d calls answered 200, %d billing events of status 200", c.get(http.StatusOK), answered)
	}
	if counter != sum {
		t.Errorf("the COST MONTH counter is %d, the billing events' costMicroUsd sum %d: want them equal", counter, sum)
	}
	if counter < costBudget {
		t.Errorf("the calls spent %d of %d: the run never reached the budget", counter, costBudget)
	}
	if most <= 0 || counter > costBudget-1+1000*most {
		t.Errorf("spent %d of %d with calls of at most %d each: past the bound", counter, costBudget, most)
	}
	t.Logf("%d of 1,000 calls admitted, spent %d micro-USD of %d (calls of at most %d)", answered, counter, costBudget, most)
}

// TestCostLimitExactAcrossReplicas: 1,000 concurrent calls against a COST MONTH budget on a priced Endpoint, through
// two gatewayd processes sharing one redis-server and through one gatewayd on the embedded store. The budget's
// counter (read from Redis, and from the embedded store's file after a graceful stop) equals the sum of the billing
// events' costMicroUsd exactly, the budget is reached, and the spend past it stays within the stated bound.
func TestCostLimitExactAcrossReplicas(t *testing.T) {
	t.Run("redis, two gatewayds", func(t *testing.T) {
		srv := redistest.Start(t)
		w := pricedWorkspace(t)
		flags := []string{"--store=redis", "--redis-url=" + srv.URL()}
		urls := []string{startGatewayd(t, w.ns, flags...).url, startGatewayd(t, w.ns, flags...).url}
		c := hammer(1000, urls, []string{w.keys["acme"]})
		sum, most, answered := eventCosts(t, urls[1], w, 1000)
		// The header of (ns, acme, demo/echo) holds the MONTH COST count as its 20th little-endian int64.
		head, err := srv.Client().GetRange(context.Background(), "mg:"+w.ns+":acme:"+slug, 152, 159).Result()
		if err != nil || len(head) != 8 {
			t.Fatalf("COST MONTH counter: %q %v", head, err)
		}
		checkCostRun(t, c, int64(byteorder.LittleEndian.Uint64([]byte(head))), sum, most, answered)
	})
	t.Run("embedded", func(t *testing.T) {
		dir := t.TempDir()
		w := pricedWorkspace(t)
		g := startGatewayd(t, w.ns, "--store=embedded", "--state-dir="+dir)
		c := hammer(1000, []string{g.url}, []string{w.keys["acme"]})
		sum, most, answered := eventCosts(t, g.url, w, 1000)
		g.signal(syscall.SIGTERM)
		db, err := bolt.Open(filepath.Join(dir, "gatewayd.db"), 0o600, &bolt.Options{Timeout: 5 * time.Second, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var counter int64
		_ = db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket([]byte("limits.month")); b != nil {
				if v := b.Get([]byte(w.ns + "\x00acme\x00" + slug + "\x00COST")); len(v) == 8 {
					counter = int64(byteorder.BigEndian.Uint64(v))
				}
			}
			return nil
		})
		checkCostRun(t, c, counter, sum, most, answered)
	})
}
