package events

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

var t0 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

// withStores runs fn on each billing store a deployment runs (bbolt; Redis standalone, Sentinel and Cluster on
// real redis-server processes), holding five events of ws a minute apart (keys
// p0 to p4, alternately of entity e0 and e1) and one of another workspace.
func withStores(t *testing.T, fn func(t *testing.T, store billing.Store)) {
	seed := func(t *testing.T, store billing.Store) billing.Store {
		var recs []billing.Record
		for i := range 5 {
			recs = append(recs, billing.Record{Namespace: "ws", Event: billing.Event{IdempotencyKey: ids.New(ids.BillingEvent),
				RequestID: ids.New(ids.Request), Timestamp: t0.Add(time.Duration(i) * time.Minute), APIKeyPrefix: "p" + strconv.Itoa(i),
				ExternalEntityID: "e" + strconv.Itoa(i%2), GroupID: "g", ModelSlug: "m", StatusCode: 200}})
		}
		recs = append(recs, billing.Record{Namespace: "other", Event: billing.Event{IdempotencyKey: ids.New(ids.BillingEvent),
			Timestamp: t0, APIKeyPrefix: "p0", StatusCode: 200}})
		if err := store.Append(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
		return store
	}
	t.Run("bolt", func(t *testing.T) {
		db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		fn(t, seed(t, billing.NewBolt(db)))
	})
	t.Run("redis", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, d *redistest.Deployment) { fn(t, seed(t, billing.NewRedis(d.Client(), ""))) })
	})
}

type answer struct {
	status int
	page   struct {
		Items      []billing.Event `json:"items"`
		Pagination struct {
			HasMore bool    `json:"has_more"`
			Cursor  *string `json:"cursor"`
		} `json:"pagination"`
	}
	err struct {
		ErrorCode string               `json:"error_code"`
		Detail    []httperr.FieldError `json:"detail"`
	}
}

func get(t *testing.T, store billing.Store, query string) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler(store)(rec, httptest.NewRequest(http.MethodGet, "/v1/gateway/events?"+query, nil), "ws")
	a := answer{status: rec.Code}
	target := any(&a.page)
	if rec.Code != http.StatusOK {
		target = &a.err
	}
	if err := json.Unmarshal(rec.Body.Bytes(), target); err != nil {
		t.Fatalf("GET ?%s: %d %s: %v", query, rec.Code, rec.Body, err)
	}
	return a
}

// TestPagesAndFilters: the workspace's events in time order, two by two with the cursor until it is null;
// filtered by key prefixes and entity ids, comma-separated or repeated, and by time (start inclusive, end
// exclusive) on the embedded store. (The Redis store reads time from its stream ids, the time of each write, which
// a test cannot backdate: the seeded events are all written at once.)
func TestPagesAndFilters(t *testing.T) {
	withStores(t, func(t *testing.T, store billing.Store) {
		if _, embedded := store.(*billing.Bolt); embedded {
			start, end := t0.Add(time.Minute).Format(time.RFC3339), strconv.FormatInt(t0.Add(3*time.Minute).Unix(), 10)
			a := get(t, store, "start_time="+start+"&end_time="+end)
			var keys []string
			for _, e := range a.page.Items {
				keys = append(keys, e.APIKeyPrefix)
			}
			if a.status != http.StatusOK || fmtList(keys) != "[p1 p2]" {
				t.Errorf("from %s to %s: %d %v, want [p1 p2]", start, end, a.status, keys)
			}
		}
		var got []string
		query := "limit=2"
		for pages := 0; ; pages++ {
			a := get(t, store, query)
			if a.status != http.StatusOK || pages > 3 {
				t.Fatalf("page %d: status %d", pages, a.status)
			}
			for _, e := range a.page.Items {
				got = append(got, e.APIKeyPrefix)
			}
			if !a.page.Pagination.HasMore {
				if a.page.Pagination.Cursor != nil {
					t.Fatalf("the last page has a cursor %q", *a.page.Pagination.Cursor)
				}
				break
			}
			query = "limit=2&cursor=" + *a.page.Pagination.Cursor
		}
		if want := "[p0 p1 p2 p3 p4]"; fmtList(got) != want {
			t.Fatalf("paged through %v, want %s", got, want)
		}
		for _, tc := range []struct{ query, want string }{
			{"api_keys=p0,p3&api_keys=p4", "[p0 p3 p4]"},
			{"external_entity_ids=e1", "[p1 p3]"},
			{"api_keys=nobody", "[]"},
		} {
			a := get(t, store, tc.query)
			var keys []string
			for _, e := range a.page.Items {
				keys = append(keys, e.APIKeyPrefix)
			}
			if a.status != http.StatusOK || fmtList(keys) != tc.want || a.page.Items == nil {
				t.Errorf("?%s: %d %v, want %s", tc.query, a.status, keys, tc.want)
			}
		}
	})
}

func fmtList(s []string) string { return "[" + strings.Join(s, " ") + "]" }

// TestRefusesBadParametersAsEveryRouteDoes: each bad parameter is 400 invalid_request whose detail is the one
// list of {field, message} naming it, the same answer the other list routes give a bad limit or cursor.
func TestRefusesBadParametersAsEveryRouteDoes(t *testing.T) {
	withStores(t, func(t *testing.T, store billing.Store) {
		for _, tc := range []struct{ query, field string }{
			{"start_time=yesterday", "start_time"},
			{"end_time=soon", "end_time"},
			{"start_time=200&end_time=100", "end_time"},
			{"limit=0", "limit"},
			{"limit=1001", "limit"},
			{"limit=ten", "limit"},
			{"cursor=not-a-cursor", "cursor"},
		} {
			a := get(t, store, tc.query)
			if a.status != http.StatusBadRequest || a.err.ErrorCode != httperr.CodeInvalidRequest ||
				len(a.err.Detail) != 1 || a.err.Detail[0].Field != tc.field || a.err.Detail[0].Message == "" {
				t.Errorf("?%s: %d %+v, want 400 invalid_request naming %s", tc.query, a.status, a.err, tc.field)
			}
		}
	})
}

// failing is a store whose reads fail.
type failing struct{ billing.Store }

func (failing) List(context.Context, string, billing.Query) ([]billing.Event, string, error) {
	return nil, "", errors.New("store unreachable")
}

// TestStoreFailureIsUnavailable: a read the store fails is 503 unavailable, not a refusal of the request.
func TestStoreFailureIsUnavailable(t *testing.T) {
	if a := get(t, failing{}, ""); a.status != http.StatusServiceUnavailable || a.err.ErrorCode != httperr.CodeUnavailable {
		t.Fatalf("a failed read: %d %+v, want 503 unavailable", a.status, a.err)
	}
}
