package state

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

type event struct {
	IdempotencyKey   string    `json:"idempotencyKey"`
	Timestamp        time.Time `json:"timestamp"`
	RequestID        string    `json:"requestId"`
	ModelSlug        string    `json:"modelSlug"`
	ExternalEntityID string    `json:"externalEntityId"`
	GroupID          string    `json:"groupId"`
	APIKeyPrefix     string    `json:"apiKeyPrefix"`
	StatusCode       int       `json:"statusCode"`
	Tokens           struct {
		InputTokens  int64 `json:"inputTokens"`
		OutputTokens int64 `json:"outputTokens"`
	} `json:"tokens"`
}

// receiver is a billing webhook that refuses its first attempts and verifies every signature itself, from the
// Standard Webhooks specification rather than gatewayd's code.
type receiver struct {
	t         *testing.T
	key       []byte
	failFirst int

	mu       sync.Mutex
	attempts int
	badSigs  int
	events   map[string]event // by idempotencyKey
	received int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.attempts++
	id, ts, sigs := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature")
	mac := hmac.New(sha256.New, rc.key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	sec, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute ||
		!slices.ContainsFunc(strings.Fields(sigs), func(s string) bool { return hmac.Equal([]byte(s), []byte(want)) }) {
		rc.badSigs++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if rc.attempts <= rc.failFirst {
		http.Error(w, "try later", http.StatusInternalServerError)
		return
	}
	var msg struct {
		Type string `json:"type"`
		Data struct {
			Events []event `json:"events"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Type != "API_BILLING_USAGE" {
		rc.t.Errorf("webhook body %s: type %q, err %v", body, msg.Type, err)
	}
	for _, e := range msg.Data.Events {
		rc.events[e.IdempotencyKey] = e
		rc.received++
	}
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) unique() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.events)
}

// TestBillingWebhookAtLeastOnceAcrossRestart: every call made with a federated key reaches the billing webhook,
// signed, exactly once after dedupe by idempotencyKey, although the receiver fails its first attempts and
// gatewayd is restarted (SIGTERM) in between; GET /v1/gateway/events lists the same events in time order.
func TestBillingWebhookAtLeastOnceAcrossRestart(t *testing.T) {
	for _, store := range []string{"embedded", "redis"} {
		t.Run(store, func(t *testing.T) {
			var flags []string
			if store == "redis" {
				flags = []string{"--store=redis", "--redis-url=" + redistest.Start(t).URL()}
			} else {
				flags = []string{"--store=embedded", "--state-dir=" + t.TempDir()}
			}
			raw := make([]byte, 24)
			_, _ = rand.Read(raw)
			rc := &receiver{t: t, key: raw, failFirst: 3, events: map[string]event{}}
			hook := httptest.NewServer(rc)
			t.Cleanup(hook.Close)
			w := newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"), []gatewaytest.Group{{ID: "acme", Models: usageLimited(1000)}},
				func(s *snapshot.Snapshot) {
					s.Workspace.BillingWebhook = &snapshot.BillingWebhook{URL: hook.URL, Secret: snapshot.SecretRef{Name: "billing-webhook", Key: "secret"}}
				})
			if err := gatewaytest.CreateSecret(context.Background(), cs, w.ns, "billing-webhook", "secret", "whsec_"+base64.StdEncoding.EncodeToString(raw)); err != nil {
				t.Fatal(err)
			}
			var calls tally
			g := startGatewayd(t, w.ns, flags...)
			for range 15 {
				calls.add(chat(g.url, w.keys["acme"]))
			}
			g.signal(syscall.SIGTERM)
			g = startGatewayd(t, w.ns, flags...)
			for range 15 {
				calls.add(chat(g.url, w.keys["acme"]))
			}
			if calls.get(http.StatusOK) != 30 {
				t.Fatalf("calls answered %v, want 30 x 200", calls.by)
			}
			deadline := time.Now().Add(60 * time.Second)
			for rc.unique() < 30 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			rc.mu.Lock()
			defer rc.mu.Unlock()
			if rc.attempts <= rc.failFirst || rc.badSigs != 0 {
				t.Fatalf("webhook attempts %d (first %d refused), bad signatures %d", rc.attempts, rc.failFirst, rc.badSigs)
			}
			if len(rc.events) != 30 {
				t.Fatalf("webhook received %d distinct events (%d in all), want 30", len(rc.events), rc.received)
			}
			seen := map[string]bool{}
			for _, e := range rc.events {
				seen[e.RequestID] = true
				if e.ExternalEntityID != "ext-acme" || e.GroupID != "acme" || e.ModelSlug != slug || e.StatusCode != 200 ||
					e.Tokens.InputTokens != 2 || e.Tokens.OutputTokens != 5 || e.APIKeyPrefix != w.keys["acme"][:16] || e.IdempotencyKey == "" {
					t.Errorf("event %+v does not describe the call", e)
				}
			}
			for _, id := range calls.ids {
				if !seen[id] {
					t.Errorf("call %s has no delivered event", id)
				}
			}
			t.Logf("Webhook: %d attempts, %d events delivered for 30 calls", rc.attempts, rc.received)
			checkEventsAPI(t, g.url, w, calls.ids)
		})
	}
}

// checkEventsAPI pages through GET /v1/gateway/events and checks order, filters and auth.
func checkEventsAPI(t *testing.T, base string, w *workspace, ids []string) {
	t.Helper()
	get := func(key string, q url.Values) (int, []event, *string) {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/gateway/events?"+q.Encode(), nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var page struct {
			Items      []event `json:"items"`
			Pagination struct {
				HasMore bool    `json:"has_more"`
				Cursor  *string `json:"cursor"`
			} `json:"pagination"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&page)
		return resp.StatusCode, page.Items, page.Pagination.Cursor
	}
	if code, _, _ := get("", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/gateway/events without a key = %d, want 401", code)
	}
	if code, _, _ := get(w.keys["acme"], nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/gateway/events with a federated key = %d, want 401", code)
	}
	if code, _, _ := get(w.personal, nil); code != http.StatusForbidden {
		t.Errorf("GET /v1/gateway/events with a non-admin PERSONAL key = %d, want 403", code)
	}
	if code, _, _ := get(w.admin, url.Values{"limit": {"0"}}); code != http.StatusBadRequest {
		t.Errorf("GET /v1/gateway/events?limit=0 = %d, want 400", code)
	}
	var all []event
	q := url.Values{"limit": {"7"}, "external_entity_ids": {"ext-acme"}, "api_keys": {w.keys["acme"][:16]}}
	for range 10 {
		code, items, cursor := get(w.admin, q)
		if code != http.StatusOK {
			t.Fatalf("GET /v1/gateway/events = %d", code)
		}
		all = append(all, items...)
		if cursor == nil {
			break
		}
		q.Set("cursor", *cursor)
	}
	if len(all) != len(ids) {
		t.Fatalf("paged listing returned %d events, want %d", len(all), len(ids))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Timestamp.Before(all[i-1].Timestamp) {
			t.Fatalf("listing not in ascending time order at %d", i)
		}
	}
	if _, items, _ := get(w.admin, url.Values{"external_entity_ids": {"ext-nobody"}}); len(items) != 0 {
		t.Errorf("filter by another external entity returned %d events, want 0", len(items))
	}
	if _, items, _ := get(w.admin, url.Values{"end_time": {strconv.FormatInt(all[0].Timestamp.Add(-time.Hour).Unix(), 10)}}); len(items) != 0 {
		t.Errorf("end_time before every event returned %d events, want 0", len(items))
	}
}
