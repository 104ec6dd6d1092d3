package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/apibody"
	"github.com/modelgate/modelgate/test/stack"
)

const (
	cascadeMsg = "Child group exceeds parent group limit."
	echo       = stack.EndpointSlug
	otherSlug  = "demo/other"
	// dailyRequests is the grandchild's REQUEST per DAY usage limit: small, so the 429 comes without a clock.
	dailyRequests = 5
)

var groupIDPattern = regexp.MustCompile(`^grp-[0-9a-z]{16}$`)

// lifecycle is the state the ordered steps of TestLifecycle hand to each other.
type lifecycle struct {
	s   *stack.Stack
	run string // suffix that keeps external ids unique across -count runs on one stack

	root, child, grandchild string
	level4, level5          string
	key, keyPrefix          string // minted on the grandchild
	admitted                int    // calls on the grandchild's demo/echo that the gateway let through
	registered              string // caller-registered key on the child
}

func (l *lifecycle) ext(name string) string { return "e2e-" + name + "-" + l.run }

// grandchildModels is the grandchild's model list; the usage limit must come back with demo/echo whenever a
// PATCH puts the slug back.
func grandchildModels(extra ...map[string]any) []any {
	out := []any{apibody.Model(echo, nil, []map[string]any{apibody.Limit("REQUEST", "DAY", dailyRequests)})}
	for _, m := range extra {
		out = append(out, m)
	}
	return out
}

// TestLifecycle walks a gateway customer's lifecycle in order (docs/rest-api.md "Groups" and "Federated keys";
// docs/limits.md "The rules"), through gatewayd's /v1 management API and its inference route only. Each step
// depends on the ones before it, so the first failure stops the walk.
func TestLifecycle(t *testing.T) {
	l := &lifecycle{s: theStack(t), run: strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)}
	steps := []struct {
		name string
		f    func(*testing.T)
	}{
		{"CreateCascadingRoot", l.createRoot},
		{"CreateChildAndGrandchild", l.createDescendants},
		{"CascadingViolation", l.cascadingViolation},
		{"DepthSix", l.depthSix},
		{"ModeMismatch", l.modeMismatch},
		{"ListPaginated", l.listPaginated},
		{"LookupByExternalID", l.lookupByExternalID},
		{"MintAndCallAtOnce", l.mintAndCall},
		{"PatchSetSemantics", l.patchSetSemantics},
		{"UsageLimit429", l.usageLimit},
		{"UsageEnvelope", l.usageEnvelope},
		{"BillingEvents", l.billingEvents},
		{"RevokeKey", l.revoke},
		{"RegisterKeys", l.registerKeys},
		{"DeleteRootCascades", l.deleteRoot},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.f) {
			t.Fatalf("step %s failed; the later steps depend on it", st.name)
		}
	}
}

func (l *lifecycle) createGroup(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	r := admin(t, l.s, http.MethodPost, "/v1/gateway/groups", body)
	expect(t, r, http.StatusCreated, "")
	if id, _ := r.body["id"].(string); !groupIDPattern.MatchString(id) {
		t.Fatalf("service-assigned id %q does not match %s", id, groupIDPattern)
	}
	return r.body
}

func (l *lifecycle) createRoot(t *testing.T) {
	g := l.createGroup(t, apibody.Group(l.ext("root"), "CASCADING", nil, apibody.Model(echo,
		[]map[string]any{apibody.Limit("REQUEST", "MINUTE", 1000), apibody.Limit("TOKEN", "MINUTE", 1000000)},
		[]map[string]any{apibody.Limit("REQUEST", "DAY", 1000), apibody.Limit("TOKEN", "DAY", 10000000)})))
	l.root = g["id"].(string)
	h := g["hierarchy"].(map[string]any)
	if h["limit_enforcement"] != "CASCADING" || h["parent_group_id"] != nil {
		t.Fatalf("root hierarchy = %v, want CASCADING without a parent", h)
	}
	eff := effective(t, g, echo)
	wantLimits(t, "root rate_limits", eff["rate_limits"],
		elimit("REQUEST", "MINUTE", 1000, l.root), elimit("TOKEN", "MINUTE", 1000000, l.root))
	wantLimits(t, "root usage_limits", eff["usage_limits"],
		elimit("REQUEST", "DAY", 1000, l.root), elimit("TOKEN", "DAY", 10000000, l.root))
}

func (l *lifecycle) createDescendants(t *testing.T) {
	// The child omits limit_enforcement and must take the root's mode.
	c := l.createGroup(t, apibody.Group(l.ext("child"), "", l.root, apibody.Model(echo, []map[string]any{apibody.Limit("REQUEST", "MINUTE", 500)}, nil)))
	l.child = c["id"].(string)
	if h := c["hierarchy"].(map[string]any); h["limit_enforcement"] != "CASCADING" || h["parent_group_id"] != l.root {
		t.Fatalf("child hierarchy = %v, want CASCADING under %s", h, l.root)
	}
	gc := l.createGroup(t, apibody.Group(l.ext("grandchild"), "CASCADING", l.child, grandchildModels()[0].(map[string]any)))
	l.grandchild = gc["id"].(string)
	// Cascading: every distinct ancestor limit applies, each anchored to the group that declares it.
	eff := effective(t, gc, echo)
	wantLimits(t, "grandchild rate_limits", eff["rate_limits"],
		elimit("REQUEST", "MINUTE", 500, l.child), elimit("REQUEST", "MINUTE", 1000, l.root), elimit("TOKEN", "MINUTE", 1000000, l.root))
	wantLimits(t, "grandchild usage_limits", eff["usage_limits"],
		elimit("REQUEST", "DAY", dailyRequests, l.grandchild), elimit("REQUEST", "DAY", 1000, l.root), elimit("TOKEN", "DAY", 10000000, l.root))
	if m := gc["models"].([]any)[0].(map[string]any); len(m["rate_limits"].([]any)) != 0 {
		t.Fatalf("grandchild declared no rate limits but models[0] = %v (want rate_limits [])", m)
	}
}

func (l *lifecycle) cascadingViolation(t *testing.T) {
	r := admin(t, l.s, http.MethodPost, "/v1/gateway/groups", apibody.Group(l.ext("greedy"), "CASCADING", l.root,
		apibody.Model(echo, []map[string]any{apibody.Limit("REQUEST", "MINUTE", 2000)}, nil)))
	expect(t, r, http.StatusBadRequest, "child_exceeds_parent_limit")
	if r.body["error"] != cascadeMsg {
		t.Fatalf("error = %q, want exactly %q", r.body["error"], cascadeMsg)
	}

	// The other direction: an ancestor may not fall below a descendant (the grandchild's 5 requests per day).
	r = admin(t, l.s, http.MethodPatch, "/v1/gateway/groups/"+l.root, map[string]any{"models": []any{apibody.Model(echo,
		[]map[string]any{apibody.Limit("REQUEST", "MINUTE", 1000), apibody.Limit("TOKEN", "MINUTE", 1000000)},
		[]map[string]any{apibody.Limit("REQUEST", "DAY", dailyRequests-1), apibody.Limit("TOKEN", "DAY", 10000000)})}})
	expect(t, r, http.StatusBadRequest, "child_exceeds_parent_limit")
	if r.body["error"] != cascadeMsg {
		t.Fatalf("error = %q, want exactly %q", r.body["error"], cascadeMsg)
	}
}

func (l *lifecycle) depthSix(t *testing.T) {
	l.level4 = l.createGroup(t, apibody.Group(l.ext("level4"), "CASCADING", l.grandchild, apibody.Model(echo, nil, nil)))["id"].(string)
	l.level5 = l.createGroup(t, apibody.Group(l.ext("level5"), "CASCADING", l.level4, apibody.Model(echo, nil, nil)))["id"].(string)
	r := admin(t, l.s, http.MethodPost, "/v1/gateway/groups", apibody.Group(l.ext("level6"), "CASCADING", l.level5, apibody.Model(echo, nil, nil)))
	expect(t, r, http.StatusBadRequest, "")
	if msg, _ := r.body["error"].(string); !strings.Contains(msg, "parent_group_id") {
		t.Fatalf("a depth refusal must name hierarchy.parent_group_id: %s", r)
	}
}

func (l *lifecycle) modeMismatch(t *testing.T) {
	r := admin(t, l.s, http.MethodPost, "/v1/gateway/groups", apibody.Group(l.ext("indep"), "INDEPENDENT", l.root, apibody.Model(echo, nil, nil)))
	expect(t, r, http.StatusBadRequest, "")
	if msg, _ := r.body["error"].(string); !strings.Contains(msg, "limit_enforcement") {
		t.Fatalf("a mode refusal must name hierarchy.limit_enforcement: %s", r)
	}
}

func (l *lifecycle) listPaginated(t *testing.T) {
	seen := map[string]int{}
	cursor, pages := "", 0
	for {
		q := url.Values{"limit": {"2"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := admin(t, l.s, http.MethodGet, "/v1/gateway/groups?"+q.Encode(), nil)
		expect(t, r, http.StatusOK, "")
		items, _ := r.body["items"].([]any)
		if len(items) > 2 {
			t.Fatalf("page %d has %d items with limit=2", pages, len(items))
		}
		for _, it := range items {
			seen[it.(map[string]any)["id"].(string)]++
		}
		pages++
		p := r.body["pagination"].(map[string]any)
		if p["has_more"] == false {
			if p["cursor"] != nil {
				t.Fatalf("a drained list must have cursor null: %v", p)
			}
			break
		}
		if cursor, _ = p["cursor"].(string); cursor == "" {
			t.Fatalf("has_more without a cursor: %v", p)
		}
		if pages > 100 {
			t.Fatalf("the list did not drain in 100 pages")
		}
	}
	for _, id := range []string{l.root, l.child, l.grandchild, l.level4, l.level5} {
		if seen[id] != 1 {
			t.Errorf("group %s returned %d times, want exactly once", id, seen[id])
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("group %s returned %d times", id, n)
		}
	}
	if pages < 3 {
		t.Errorf("five groups with limit=2 took %d pages, want at least 3", pages)
	}
}

func (l *lifecycle) lookupByExternalID(t *testing.T) {
	r := admin(t, l.s, http.MethodGet, "/v1/gateway/groups?external_entity_id="+url.QueryEscape(l.ext("grandchild")), nil)
	expect(t, r, http.StatusOK, "")
	items, _ := r.body["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["id"] != l.grandchild {
		t.Fatalf("lookup by external id returned %s, want only %s", r, l.grandchild)
	}
	if p := r.body["pagination"].(map[string]any); p["has_more"] != false || p["cursor"] != nil {
		t.Fatalf("a lookup is one page: %v", p)
	}
	r = admin(t, l.s, http.MethodGet, "/v1/gateway/groups?external_entity_id="+url.QueryEscape(l.ext("nobody")), nil)
	expect(t, r, http.StatusOK, "")
	if items, _ := r.body["items"].([]any); len(items) != 0 {
		t.Fatalf("an unknown external id must find nothing: %s", r)
	}
}

// mintAndCall is read-your-writes: the key must work on the very next call, with no retry.
func (l *lifecycle) mintAndCall(t *testing.T) {
	r := admin(t, l.s, http.MethodPost, "/v1/gateway/groups/"+l.grandchild+"/api_keys", map[string]any{"name": "e2e"})
	expect(t, r, http.StatusCreated, "")
	l.key, l.keyPrefix = str(t, r.body, "api_key"), str(t, r.body, "prefix")
	if !regexp.MustCompile(`^mgk_[0-9A-Za-z]{12}\.[0-9A-Za-z]{32}$`).MatchString(l.key) || l.keyPrefix != l.key[:16] || r.body["name"] != "e2e" {
		t.Fatalf("minted key has the wrong shape: prefix %q name %v", l.keyPrefix, r.body["name"])
	}
	l.callEcho(t, http.StatusOK)
}

// callEcho calls demo/echo with the grandchild's key, counting admitted calls.
func (l *lifecycle) callEcho(t *testing.T, want int) response {
	t.Helper()
	r := infer(t, l.s, l.key, echo)
	if r.code == http.StatusOK {
		l.admitted++
		if _, ok := r.body["choices"]; !ok {
			t.Fatalf("a 200 from the upstream must carry choices: %s", r)
		}
	}
	if r.code != want {
		t.Fatalf("call %d on %s: want HTTP %d, got %s", l.admitted, echo, want, r)
	}
	return r
}

func (l *lifecycle) patchModels(t *testing.T, models []any) map[string]any {
	t.Helper()
	r := admin(t, l.s, http.MethodPatch, "/v1/gateway/groups/"+l.grandchild, map[string]any{"models": models})
	expect(t, r, http.StatusOK, "")
	return r.body
}

func (l *lifecycle) patchSetSemantics(t *testing.T) {
	g := l.patchModels(t, grandchildModels(apibody.Model(otherSlug, nil, nil)))
	if got := slugs(g["models"]); !slices.Equal(got, []string{echo, otherSlug}) {
		t.Fatalf("after adding a slug, models = %v", got)
	}
	l.callEcho(t, http.StatusOK)
	// No Endpoint routes the added slug: the key may call it, and the gateway says the model is not ready.
	expect(t, infer(t, l.s, l.key, otherSlug), http.StatusServiceUnavailable, "model_not_ready")

	// Set semantics: the list replaces the group's models, so demo/echo is gone as soon as the PATCH returns.
	g = l.patchModels(t, []any{apibody.Model(otherSlug, nil, nil)})
	if got := slugs(g["models"]); !slices.Equal(got, []string{otherSlug}) {
		t.Fatalf("after replacing, models = %v", got)
	}
	if got := slugs(g["effective_models"]); !slices.Equal(got, []string{otherSlug}) {
		t.Fatalf("after replacing, effective_models = %v", got)
	}
	r := l.callEcho(t, http.StatusNotFound)
	expect(t, r, http.StatusNotFound, "model_does_not_exist")

	g = l.patchModels(t, grandchildModels())
	if got := slugs(g["models"]); !slices.Equal(got, []string{echo}) {
		t.Fatalf("after putting it back, models = %v", got)
	}
	l.callEcho(t, http.StatusOK)
}

func (l *lifecycle) usageLimit(t *testing.T) {
	var r response
	for r.code != http.StatusTooManyRequests {
		if l.admitted > dailyRequests {
			t.Fatalf("%d calls were admitted under a limit of %d per day", l.admitted, dailyRequests)
		}
		r = infer(t, l.s, l.key, echo)
		switch r.code {
		case http.StatusOK:
			l.admitted++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("want 200 or 429, got %s", r)
		}
	}
	if l.admitted != dailyRequests {
		t.Fatalf("the first 429 came after %d admitted calls, want %d", l.admitted, dailyRequests)
	}
	expect(t, r, http.StatusTooManyRequests, "usage_limit_exceeded")
	want := map[string]any{"slug": echo, "type": "REQUEST", "unit": "DAY", "threshold": float64(dailyRequests), "source_group": l.grandchild}
	if d, _ := r.body["fields"].(map[string]any); !mapsEqual(d, want) {
		t.Fatalf("429 detail = %v, want %v", r.body["fields"], want)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 24*60*60 {
		t.Fatalf("Retry-After = %q, want whole seconds until the next UTC midnight", r.header.Get("Retry-After"))
	}
	// A refused call is not admitted: the next one is refused too.
	expect(t, infer(t, l.s, l.key, echo), http.StatusTooManyRequests, "usage_limit_exceeded")
}

func (l *lifecycle) usageEnvelope(t *testing.T) {
	r := admin(t, l.s, http.MethodGet, "/v1/gateway/groups/"+l.grandchild+"/usage", nil)
	nextMidnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).Format(time.RFC3339)
	expect(t, r, http.StatusOK, "")
	if r.body["group_id"] != l.grandchild || r.body["external_entity_id"] != l.ext("grandchild") {
		t.Fatalf("usage envelope names the wrong group: %s", r)
	}
	var got struct {
		Usage map[string][]map[string]any `json:"usage"`
	}
	if err := json.Unmarshal(r.raw, &got); err != nil {
		t.Fatalf("usage envelope does not decode: %v: %s", err, r)
	}
	// Every DAY limit in force for the grandchild: its own, and the root's that it inherits in its CASCADING tree,
	// each with the counter it charges (the root's pool for the root's limits).
	want := map[string]any{"type": "REQUEST", "unit": "DAY", "threshold": float64(dailyRequests),
		"current_usage": float64(l.admitted), "reset_at": nextMidnight, "source_group": l.grandchild}
	var own, inherited int
	for _, u := range got.Usage[echo] {
		switch u["source_group"] {
		case l.grandchild:
			own++
			if !mapsEqual(u, want) {
				t.Fatalf("grandchild's own usage entry = %v, want %v", u, want)
			}
		case l.root:
			inherited++
			if u["type"] == "REQUEST" && u["current_usage"] != float64(l.admitted) {
				t.Errorf("inherited root REQUEST/DAY current_usage = %v, want the %d calls admitted below the root", u["current_usage"], l.admitted)
			}
		default:
			t.Errorf("usage entry of an unexpected source: %v", u)
		}
	}
	if len(got.Usage) != 1 || own != 1 || inherited != 2 {
		t.Fatalf("grandchild usage = %s, want on %s its own limit and the root's two", r.raw, echo)
	}

	// Cascading: the grandchild's admitted calls also count against the root's daily pool.
	r = admin(t, l.s, http.MethodGet, "/v1/gateway/groups/"+l.root+"/usage", nil)
	expect(t, r, http.StatusOK, "")
	got.Usage = nil
	if err := json.Unmarshal(r.raw, &got); err != nil {
		t.Fatalf("usage envelope does not decode: %v: %s", err, r)
	}
	for _, u := range got.Usage[echo] {
		switch u["type"] {
		case "REQUEST":
			if u["current_usage"] != float64(l.admitted) {
				t.Errorf("root REQUEST/DAY current_usage = %v, want the %d calls admitted below it", u["current_usage"], l.admitted)
			}
		case "TOKEN":
			if n, _ := u["current_usage"].(float64); n <= 0 {
				t.Errorf("root TOKEN/DAY current_usage = %v, want the tokens the upstream reported", u["current_usage"])
			}
		}
	}
	if len(got.Usage[echo]) != 2 {
		t.Errorf("root usage = %s, want its two DAY limits on %s", r.raw, echo)
	}
}

// billingEvents: the local stack runs gatewayd with cmd/gatewayd's wiring, billing store included, so the calls
// of the key are billing events at GET /v1/gateway/events.
func (l *lifecycle) billingEvents(t *testing.T) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := admin(t, l.s, http.MethodGet, "/v1/gateway/events?api_keys="+l.keyPrefix, nil)
		expect(t, r, http.StatusOK, "")
		items, _ := r.body["items"].([]any)
		ok := 0
		for _, it := range items {
			ev, _ := it.(map[string]any)
			if ev["apiKeyPrefix"] == l.keyPrefix && ev["externalEntityId"] == l.ext("grandchild") && ev["statusCode"] == float64(http.StatusOK) {
				ok++
			}
		}
		if ok == l.admitted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d billing events of admitted calls for key %s, want %d: %s", ok, l.keyPrefix, l.admitted, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (l *lifecycle) revoke(t *testing.T) {
	path := "/v1/gateway/groups/" + l.grandchild + "/api_keys/" + l.keyPrefix
	r := admin(t, l.s, http.MethodDelete, path, nil)
	expect(t, r, http.StatusOK, "")
	if r.body["prefix"] != l.keyPrefix {
		t.Fatalf("revoke answered %s, want the prefix %s", r, l.keyPrefix)
	}
	expect(t, infer(t, l.s, l.key, echo), http.StatusUnauthorized, "unauthorized")
	expect(t, admin(t, l.s, http.MethodGet, path, nil), http.StatusNotFound, "not_found")
}

// register posts a signed registration; tamper signs other bytes than the body.
func (l *lifecycle) register(t *testing.T, groupID string, body map[string]any, tamper bool) response {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	signed := raw
	if tamper {
		signed = append(append([]byte(nil), raw...), ' ')
	}
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(l.s.SigningKey, signed))
	return admin(t, l.s, http.MethodPost, "/v1/gateway/groups/"+groupID+"/api_keys/register", raw, "X-Service-Signature", sig)
}

func (l *lifecycle) registerKeys(t *testing.T) {
	// The grandchild has spent its day, so registered keys go on the child, which still has room.
	good := "e2eRegKey_" + randomBase62(t, 30)
	r := l.register(t, l.child, map[string]any{"name": "registered", "key": good}, false)
	expect(t, r, http.StatusOK, "")
	if !mapsEqual(r.body, map[string]any{"ok": true}) || strings.Contains(string(r.raw), good) {
		t.Fatalf("registration must answer exactly {ok:true} and never echo the key: %s", r)
	}
	l.registered = good
	if r := infer(t, l.s, good, echo); r.code != http.StatusOK {
		t.Fatalf("a registered key must work for inference at once: %s", r)
	}

	expect(t, l.register(t, l.child, map[string]any{"name": "x", "key": "e2eRegKey_" + randomBase62(t, 30)}, true),
		http.StatusBadRequest, "invalid_signature")
	expect(t, admin(t, l.s, http.MethodPost, "/v1/gateway/groups/"+l.child+"/api_keys/register",
		[]byte(`{"name":"x","key":"`+"e2eRegKey_"+randomBase62(t, 30)+`"}`)), http.StatusBadRequest, "invalid_signature")

	r = l.register(t, l.child, map[string]any{"name": "x", "key": strings.Repeat("ab", 20)}, false)
	expect(t, r, http.StatusBadRequest, "invalid_request")
	if !strings.Contains(r.body["error"].(string), "entropy") {
		t.Errorf("a low-entropy refusal must say so: %s", r)
	}
	for _, n := range []int{31, 129} {
		r = l.register(t, l.child, map[string]any{"name": "x", "key": randomBase62(t, n)}, false)
		expect(t, r, http.StatusBadRequest, "invalid_request")
		if !strings.Contains(r.body["error"].(string), "32 to 128") {
			t.Errorf("a %d-character key's refusal must give the bounds: %s", n, r)
		}
	}
	dup := good[:16] + randomBase62(t, 24)
	r = l.register(t, l.child, map[string]any{"name": "x", "key": dup}, false)
	expect(t, r, http.StatusConflict, "conflict")
	if strings.Contains(string(r.raw), dup[16:]) {
		t.Errorf("a conflict must not echo the key: %s", r)
	}

	l.registerWithoutPublicKey(t)
}

// registerWithoutPublicKey removes the Workspace's public key (the one edit made outside the REST API, since the
// API has no Workspace route), checks that registration is refused, and restores the key.
func (l *lifecycle) registerWithoutPublicKey(t *testing.T) {
	ctx := t.Context()
	setKey := func(kr *gatewayv1.KeyRegistration) {
		t.Helper()
		// The manager writes the Workspace's status, so an update can race it; re-read and retry.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var ws gatewayv1.Workspace
			if err := l.s.Client.Get(ctx, client.ObjectKey{Namespace: l.s.Namespace, Name: stack.WorkspaceName}, &ws); err != nil {
				return err
			}
			ws.Spec.KeyRegistration = kr
			return l.s.Client.Update(ctx, &ws)
		}); err != nil {
			t.Fatalf("failed to update the Workspace's keyRegistration: %v", err)
		}
	}
	var ws gatewayv1.Workspace
	if err := l.s.Client.Get(ctx, client.ObjectKey{Namespace: l.s.Namespace, Name: stack.WorkspaceName}, &ws); err != nil {
		t.Fatalf("failed to get the Workspace: %v", err)
	}
	saved := ws.Spec.KeyRegistration.DeepCopy()
	setKey(nil)
	restored := false
	defer func() {
		if !restored {
			setKey(saved)
		}
	}()
	expect(t, l.register(t, l.child, map[string]any{"name": "x", "key": "e2eRegKey_" + randomBase62(t, 30)}, false),
		http.StatusBadRequest, "public_key_not_registered")
	setKey(saved)
	restored = true
	expect(t, l.register(t, l.child, map[string]any{"name": "again", "key": "e2eRegKey_" + randomBase62(t, 30)}, false),
		http.StatusOK, "")
}

func (l *lifecycle) deleteRoot(t *testing.T) {
	r := admin(t, l.s, http.MethodPost, "/v1/gateway/groups/"+l.level5+"/api_keys", nil)
	expect(t, r, http.StatusCreated, "")
	deepKey := str(t, r.body, "api_key")
	// The key authenticates, and level 5 draws on its ancestors' pools: the grandchild's day is spent.
	r = infer(t, l.s, deepKey, echo)
	expect(t, r, http.StatusTooManyRequests, "usage_limit_exceeded")
	if d, _ := r.body["fields"].(map[string]any); d["source_group"] != l.grandchild {
		t.Fatalf("level 5's 429 must name the grandchild's limit: %s", r)
	}

	r = admin(t, l.s, http.MethodDelete, "/v1/gateway/groups/"+l.root, nil)
	expect(t, r, http.StatusOK, "")
	if r.body["id"] != l.root || !mapsEqual(r.body["metadata"].(map[string]any),
		map[string]any{"name": "Name " + l.ext("root"), "external_entity_id": l.ext("root")}) {
		t.Fatalf("delete answered %s", r)
	}
	if _, err := time.Parse(time.RFC3339, str(t, r.body, "deleted_at")); err != nil {
		t.Fatalf("deleted_at is not RFC 3339: %s", r)
	}
	// The subtree leaves the snapshot with the root, so every key below it fails at once.
	for name, key := range map[string]string{"level-5 key": deepKey, "registered key": l.registered} {
		if r := infer(t, l.s, key, echo); r.code != http.StatusUnauthorized {
			t.Errorf("%s after deleting the root: want 401, got %s", name, r)
		}
	}

	// The external id is free at once.
	again := l.createGroup(t, apibody.Group(l.ext("root"), "CASCADING", nil, apibody.Model(echo, nil, nil)))
	if again["id"] == l.root {
		t.Fatalf("the re-created root reused the deleted id %s", l.root)
	}
	defer admin(t, l.s, http.MethodDelete, "/v1/gateway/groups/"+again["id"].(string), nil)

	// The manager's finalizer removes descendants and their keys; that part is asynchronous, so poll for it.
	gone := []string{l.root, l.child, l.grandchild, l.level4, l.level5}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var left []string
		for _, id := range gone {
			if c := admin(t, l.s, http.MethodGet, "/v1/gateway/groups/"+id, nil).code; c != http.StatusNotFound {
				left = append(left, id+" ("+strconv.Itoa(c)+")")
			}
		}
		var keys gatewayv1.APIKeyList
		if err := l.s.Client.List(t.Context(), &keys, client.InNamespace(l.s.Namespace)); err != nil {
			t.Fatalf("failed to list APIKeys: %v", err)
		}
		for _, k := range keys.Items {
			if slices.Contains(gone, k.Spec.GroupID) {
				left = append(left, "APIKey "+k.Name)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after deleting the root these still exist: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r = admin(t, l.s, http.MethodGet, "/v1/gateway/groups?external_entity_id="+url.QueryEscape(l.ext("child")), nil)
	expect(t, r, http.StatusOK, "")
	if items, _ := r.body["items"].([]any); len(items) != 0 {
		t.Fatalf("the deleted child is still found by external id: %s", r)
	}
}

// effective returns the effective_models entry of slug.
func effective(t *testing.T, g map[string]any, slug string) map[string]any {
	t.Helper()
	for _, m := range g["effective_models"].([]any) {
		if m := m.(map[string]any); m["slug"] == slug {
			return m
		}
	}
	t.Fatalf("effective_models has no %s: %v", slug, g["effective_models"])
	return nil
}

func elimit(typ, unit string, threshold int, source string) map[string]any {
	return map[string]any{"type": typ, "unit": unit, "threshold": float64(threshold), "source_group": source}
}

// wantLimits compares limit lists as sets.
func wantLimits(t *testing.T, what string, got any, want ...map[string]any) {
	t.Helper()
	list, _ := got.([]any)
	if len(list) != len(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	for _, w := range want {
		if !slices.ContainsFunc(list, func(g any) bool { m, _ := g.(map[string]any); return mapsEqual(m, w) }) {
			t.Fatalf("%s = %v, missing %v", what, got, w)
		}
	}
}

func mapsEqual(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if av, ok := a[k]; !ok || av != v {
			return false
		}
	}
	return true
}

func slugs(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, m := range list {
		out = append(out, m.(map[string]any)["slug"].(string))
	}
	slices.Sort(out)
	return out
}

func randomBase62(t testing.TB, n int) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	out := make([]byte, n)
	for i := range out {
		v, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = alphabet[v.Int64()]
	}
	return string(out)
}
