package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/api/apikey"
	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/sessions"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is a real view of one workspace with two keys, the sessions over it, and a server on a real socket whose
// management route answers the caller it authenticated and whose model route answers the Authorization it got.
type env struct {
	t        *testing.T
	srv      *httptest.Server
	clock    *fakeClock
	cur      atomic.Pointer[view.View]
	admin    string
	other    string
	adminRec snapshot.WorkspaceAPIKey
	otherRec snapshot.WorkspaceAPIKey
	// store keeps the env's sessions.
	store sessions.Store
}

func (e *env) publish(keys ...snapshot.WorkspaceAPIKey) {
	e.t.Helper()
	ns, err := view.Build(&snapshot.Snapshot{Namespace: "ws", WorkspaceAPIKeys: keys}, time.Now().UnixNano(), "", limits.NewMemory(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.cur.Store(view.Empty().With(ns))
}

func newEnv(t *testing.T, secrets ...[]byte) *env {
	t.Helper()
	e := &env{t: t, clock: &fakeClock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}, store: sessions.NewMemory()}
	e.admin, e.adminRec = newWorkspaceKey(t, "admin", "WORKSPACE_MANAGE_ALL")
	e.adminRec.Name = "admin"
	e.other, e.otherRec = newWorkspaceKey(t, "other", "WORKSPACE_MANAGE_ALL")
	e.publish(e.adminRec, e.otherRec)
	lookup := auth.ViewLookup(func() *view.View { return e.cur.Load() })
	s, err := NewSessions(SessionOptions{Secrets: secrets, Lookup: lookup, Now: e.clock.Now, Store: e.store})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	caller := func(w http.ResponseWriter, r *http.Request) {
		c, refusal := auth.Workspace(r, lookup)
		if refusal != nil {
			w.WriteHeader(refusal.Status)
			_, _ = io.WriteString(w, refusal.Message)
			return
		}
		_, _ = io.WriteString(w, c.Key.Prefix)
	}
	mux.HandleFunc("GET /v1/gateway/groups", caller)
	mux.HandleFunc("POST /v1/gateway/groups", caller)
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "authorization="+r.Header.Get("Authorization"))
	})
	e.srv = httptest.NewServer(s.Wrap(mux))
	t.Cleanup(e.srv.Close)
	return e
}

type answer struct {
	status int
	body   string
	header http.Header
}

func (e *env) do(method, path, body string, header map[string]string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header}
}

// login signs in with key from the dashboard's own origin and returns the Cookie header value to send back.
func (e *env) login(key string) string {
	e.t.Helper()
	a := e.do("POST", "/dashboard/api/login", `{"api_key":"`+key+`"}`, map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"})
	if a.status != http.StatusOK {
		e.t.Fatalf("login: %d %s", a.status, a.body)
	}
	return cookieOf(e.t, a.header)
}

func cookieOf(t *testing.T, h http.Header) string {
	t.Helper()
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == CookieName {
			return c.Name + "=" + c.Value
		}
	}
	t.Fatalf("no %s cookie in %v", CookieName, h.Values("Set-Cookie"))
	return ""
}

func TestLoginSetsASealedStrictCookie(t *testing.T) {
	e := newEnv(t)
	a := e.do("POST", "/dashboard/api/login", `{"api_key":"`+e.admin+`"}`, map[string]string{"Sec-Fetch-Site": "same-origin"})
	if a.status != http.StatusOK {
		t.Fatalf("login: %d %s", a.status, a.body)
	}
	var who Who
	if err := json.Unmarshal([]byte(a.body), &who); err != nil {
		t.Fatal(err)
	}
	if who.Namespace != "ws" || who.KeyPrefix != e.adminRec.Prefix || who.KeyType != "WORKSPACE_MANAGE_ALL" || who.KeyName != "admin" {
		t.Errorf("who = %+v", who)
	}
	if !reflect.DeepEqual(who.Can, Can{Gateway: true, Keys: false, Models: true, KeyCreate: []KeyCreate{}}) {
		t.Errorf("can = %+v, want what authz.Decide allows WORKSPACE_MANAGE_ALL", who.Can)
	}
	if who.ExpiresAt != "2026-11-26T00:00:00Z" {
		t.Errorf("expires_at = %s, want the absolute timeout after login", who.ExpiresAt)
	}
	raw := a.header.Get("Set-Cookie")
	for _, want := range []string{CookieName + "=", "Path=/", "HttpOnly", "Secure", "SameSite=Strict"} {
		if !strings.Contains(raw, want) {
			t.Errorf("Set-Cookie %q lacks %q", raw, want)
		}
	}
	if strings.Contains(raw, e.admin) || strings.Contains(raw, strings.SplitN(e.admin, ".", 2)[1]) {
		t.Error("the cookie holds the key in the clear")
	}
	if a.header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", a.header.Get("Cache-Control"))
	}
	ck := cookieOf(t, a.header)
	// The cookie authenticates the management API as the key.
	if got := e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck}); got.status != 200 || got.body != e.adminRec.Prefix {
		t.Errorf("groups with the cookie: %d %q", got.status, got.body)
	}
	if got := e.do("GET", "/dashboard/api/session", "", map[string]string{"Cookie": ck}); got.status != 200 || !strings.Contains(got.body, e.adminRec.Prefix) {
		t.Errorf("session: %d %q", got.status, got.body)
	}
	// Without a cookie the session route says so.
	if got := e.do("GET", "/dashboard/api/session", "", nil); got.status != http.StatusNoContent {
		t.Errorf("session without a cookie: %d", got.status)
	}
}

func TestLoginRefusalsNameTheField(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"api_key":"mg_nope.nope"}`, 401, "Unknown or revoked API key."},
		{`{"api_key":""}`, 400, "api_key is required."},
		{`{"key":"x"}`, 400, "Send a JSON body"},
	} {
		a := e.do("POST", "/dashboard/api/login", tc.body, map[string]string{"Sec-Fetch-Site": "same-origin"})
		if a.status != tc.status || !strings.Contains(a.body, tc.msg) || !strings.Contains(a.body, `"field":"api_key"`) {
			t.Errorf("%s: %d %s", tc.body, a.status, a.body)
		}
		if a.header.Get("Set-Cookie") != "" {
			t.Errorf("%s: a cookie was set", tc.body)
		}
	}
}

func TestIdleAndAbsoluteTimeouts(t *testing.T) {
	e := newEnv(t)
	ck := e.login(e.admin)
	e.clock.Step(DefaultIdleTimeout - time.Minute)
	a := e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck})
	if a.status != 200 {
		t.Fatalf("within the idle timeout: %d %s", a.status, a.body)
	}
	// The use refreshed the cookie's last-seen time.
	ck = cookieOf(t, a.header)
	e.clock.Step(DefaultIdleTimeout - time.Minute)
	if a := e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck}); a.status != 200 {
		t.Fatalf("refreshed session: %d %s", a.status, a.body)
	}
	e.clock.Step(DefaultIdleTimeout)
	a = e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck})
	if a.status != http.StatusUnauthorized || !strings.Contains(a.body, "inactivity") {
		t.Errorf("idle session: %d %s", a.status, a.body)
	}
	if !strings.Contains(a.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("an ended session is not cleared: %q", a.header.Get("Set-Cookie"))
	}

	// Absolute: used every 20 minutes, the session still ends 12 hours after login.
	ck = e.login(e.admin)
	for used := time.Duration(0); used < DefaultAbsoluteTimeout-20*time.Minute; used += 20 * time.Minute {
		e.clock.Step(20 * time.Minute)
		a := e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck})
		if a.status != 200 {
			t.Fatalf("after %s: %d %s", used, a.status, a.body)
		}
		if a.header.Get("Set-Cookie") != "" {
			ck = cookieOf(t, a.header)
		}
	}
	e.clock.Step(20 * time.Minute)
	a = e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck})
	if a.status != http.StatusUnauthorized || !strings.Contains(a.body, "expired") {
		t.Errorf("past the absolute timeout: %d %s", a.status, a.body)
	}
}

func TestRevokingTheKeyEndsTheSession(t *testing.T) {
	e := newEnv(t)
	ck := e.login(e.admin)
	if a := e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck}); a.status != 200 {
		t.Fatalf("before: %d", a.status)
	}
	e.publish(e.otherRec) // the admin key is revoked: the next snapshot no longer holds it
	a := e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck})
	if a.status != http.StatusUnauthorized || !strings.Contains(a.body, "revoked") {
		t.Errorf("after revocation: %d %s", a.status, a.body)
	}
	if a := e.do("GET", "/dashboard/api/session", "", map[string]string{"Cookie": ck}); a.status != http.StatusUnauthorized {
		t.Errorf("session after revocation: %d", a.status)
	}
}

func TestCrossSiteRequestsAreRefused(t *testing.T) {
	e := newEnv(t)
	ck := e.login(e.admin)
	for _, h := range []map[string]string{
		{"Cookie": ck, "Sec-Fetch-Site": "cross-site"},
		{"Cookie": ck, "Sec-Fetch-Site": "same-site"},
		{"Cookie": ck, "Origin": "https://evil.example"},
	} {
		a := e.do("POST", "/v1/gateway/groups", "{}", h)
		if a.status != http.StatusForbidden || !strings.Contains(a.body, "Cross-origin request refused") {
			t.Errorf("%v: %d %s", h, a.status, a.body)
		}
	}
	// A cross-site login is refused too (login CSRF).
	a := e.do("POST", "/dashboard/api/login", `{"api_key":"`+e.other+`"}`, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if a.status != http.StatusForbidden || a.header.Get("Set-Cookie") != "" {
		t.Errorf("cross-site login: %d %s", a.status, a.body)
	}
	// The same POST from the dashboard's own origin passes.
	if a := e.do("POST", "/v1/gateway/groups", "{}", map[string]string{"Cookie": ck, "Sec-Fetch-Site": "same-origin"}); a.status != 200 {
		t.Errorf("same-origin POST: %d %s", a.status, a.body)
	}
}

func TestBearerIsUnaffected(t *testing.T) {
	e := newEnv(t)
	ck := e.login(e.admin)
	// A Bearer call is judged on its own key, cookie or not, and CrossOriginProtection is the cookie's concern only.
	a := e.do("POST", "/v1/gateway/groups", "{}", map[string]string{"Authorization": "Bearer " + e.other, "Cookie": ck, "Sec-Fetch-Site": "cross-site"})
	if a.status != 200 || a.body != e.otherRec.Prefix {
		t.Errorf("Bearer with a cookie: %d %q", a.status, a.body)
	}
	a = e.do("GET", "/v1/gateway/groups", "", map[string]string{"Authorization": "Bearer mg_bad.bad", "Cookie": ck})
	if a.status != http.StatusUnauthorized {
		t.Errorf("a bad Bearer key is not rescued by the cookie: %d %q", a.status, a.body)
	}
	if a := e.do("GET", "/v1/gateway/groups", "", map[string]string{"Authorization": "Bearer " + e.admin}); a.status != 200 {
		t.Errorf("Bearer alone: %d", a.status)
	}
}

func TestModelCallsNeverAcceptTheCookie(t *testing.T) {
	e := newEnv(t)
	ck := e.login(e.admin)
	a := e.do("POST", "/v1/chat/completions", "{}", map[string]string{"Cookie": ck, "Sec-Fetch-Site": "same-origin"})
	if a.body != "authorization=" {
		t.Errorf("a model call got credentials from the cookie: %q", a.body)
	}
	for _, p := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/messages", "/models/m/production/predict", "/v1/metrics"} {
		if CookieRoute(p) {
			t.Errorf("CookieRoute(%s) = true", p)
		}
	}
	for _, p := range []string{"/v1/gateway/groups", "/v1/gateway/events", "/v1/gateway/throttles", "/v1/gateway/usage", "/v1/api_keys", "/v1/models", "/v1/models/m/environments", "/v1/teams"} {
		if !CookieRoute(p) {
			t.Errorf("CookieRoute(%s) = false", p)
		}
	}
}

func TestTamperedCookiesAndKeyRotation(t *testing.T) {
	old := []byte(strings.Repeat("o", 32))
	next := []byte(strings.Repeat("n", 32))
	e := newEnv(t, old)
	ck := e.login(e.admin)
	name, val, _ := strings.Cut(ck, "=")
	flipped := []byte(val)
	flipped[len(flipped)/2] ^= 1
	if a := e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": name + "=" + string(flipped)}); a.status != http.StatusUnauthorized {
		t.Errorf("tampered cookie: %d", a.status)
	}

	// The same cookie, presented to sessions whose ring has a new first secret and keeps the old one, still opens;
	// once the old secret is dropped it does not.
	rotated := newEnvSharing(t, e, e.store, next, old)
	if a := rotated.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck}); a.status != 200 {
		t.Errorf("ring [new, old]: %d %s", a.status, a.body)
	}
	dropped := newEnvSharing(t, e, e.store, next)
	if a := dropped.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck}); a.status != http.StatusUnauthorized {
		t.Errorf("ring [new]: %d", a.status)
	}
	if _, err := NewSessions(SessionOptions{Secrets: [][]byte{[]byte("short")}, Lookup: func(string) (auth.Caller, bool) { return auth.Caller{}, false }}); err == nil {
		t.Error("a short secret was accepted")
	}
}

// newEnvSharing is an env over the same keys and clock as e, with sessions sealed by secrets and kept in store
// (a store of its own when nil): another replica of the same gatewayd when store and secrets are shared.
func newEnvSharing(t *testing.T, e *env, store sessions.Store, secrets ...[]byte) *env {
	n := newEnv(t, secrets...)
	n.clock = e.clock
	n.cur.Store(e.cur.Load())
	// newEnv's sessions read n.clock through the closure taken at construction; rebuild them on e's clock.
	lookup := auth.ViewLookup(func() *view.View { return n.cur.Load() })
	s, err := NewSessions(SessionOptions{Secrets: secrets, Lookup: lookup, Now: e.clock.Now, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	mux.HandleFunc("GET /v1/gateway/groups", func(w http.ResponseWriter, r *http.Request) {
		c, refusal := auth.Workspace(r, lookup)
		if refusal != nil {
			w.WriteHeader(refusal.Status)
			return
		}
		_, _ = io.WriteString(w, c.Key.Prefix)
	})
	n.srv.Close()
	n.srv = httptest.NewServer(s.Wrap(mux))
	t.Cleanup(n.srv.Close)
	return n
}

// newWorkspaceKey mints a workspace key in the product's format, with its snapshot record (prefix and hash only).
func newWorkspaceKey(t *testing.T, id, typ string) (string, snapshot.WorkspaceAPIKey) {
	key, err := apikey.Mint(apikey.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	return key, snapshot.WorkspaceAPIKey{ID: id, Prefix: apikey.Prefix(key), Hash: apikey.Hash(key), Type: typ}
}

// TestLogoutEndsTheSessionOnEveryReplica: two gatewayd replicas share the sealing secrets and the Redis session
// store (docs/security.md "Dashboard sessions end on the server"). Signing out on one ends the session at once on
// the other, even for a copy of the cookie kept before the sign-out; another session of the same key lives on.
func TestLogoutEndsTheSessionOnEveryReplica(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, 32)
	rdb := redistest.Start(t)
	base := newEnv(t, secret)
	a := newEnvSharing(t, base, sessions.NewRedis(rdb.Client()), secret)
	b := newEnvSharing(t, base, sessions.NewRedis(rdb.Client()), secret)
	get := func(e *env, ck string) answer {
		return e.do("GET", "/v1/gateway/groups", "", map[string]string{"Cookie": ck})
	}
	ck := a.login(base.admin)
	kept := b.login(base.admin)
	for _, e := range []*env{a, b} {
		if r := get(e, ck); r.status != http.StatusOK {
			t.Fatalf("before sign-out: %d %s", r.status, r.body)
		}
	}
	out := b.do("POST", "/dashboard/api/logout", "", map[string]string{"Cookie": ck, "Sec-Fetch-Site": "same-origin"})
	if out.status != http.StatusNoContent {
		t.Fatalf("logout: %d %s", out.status, out.body)
	}
	for name, e := range map[string]*env{"the replica that signed out": b, "the other replica": a} {
		if r := get(e, ck); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "signed out") {
			t.Errorf("%s after sign-out: %d %s, want 401", name, r.status, r.body)
		}
		if r := e.do("GET", "/dashboard/api/session", "", map[string]string{"Cookie": ck}); r.status != http.StatusUnauthorized {
			t.Errorf("%s: session after sign-out: %d", name, r.status)
		}
	}
	if r := get(a, kept); r.status != http.StatusOK {
		t.Errorf("another session of the same key after sign-out: %d %s, want 200", r.status, r.body)
	}
}

// TestKeyCreateIsWhatDecideAllows checks the session's key_create against the permission table of
// docs/rest-api.md: an organization admin creates every type anywhere; a key-management key team keys for any team
// or the workspace, and no PERSONAL or management key; a member their own PERSONAL keys and, as a Team ADMIN, that
// team's keys; a WORKSPACE_MANAGE_ALL key none.
func TestKeyCreateIsWhatDecideAllows(t *testing.T) {
	teams := &snapshot.Snapshot{Teams: []snapshot.Team{
		{ID: "blue", Members: []snapshot.Member{{UserID: "tia", Role: "MEMBER"}}},
		{ID: "red", Members: []snapshot.Member{{UserID: "tia", Role: "ADMIN"}}},
	}}
	team := func(t string) KeyCreate { return KeyCreate{Type: t, Workspace: true, AnyTeam: true, Teams: []string{}} }
	for _, tc := range []struct {
		name string
		key  snapshot.WorkspaceAPIKey
		want []KeyCreate
	}{
		{"organization admin", snapshot.WorkspaceAPIKey{Type: "PERSONAL", Owner: &snapshot.KeyOwner{UserID: "ada", Role: "ADMIN"}}, []KeyCreate{
			{Type: "PERSONAL", Workspace: true, Teams: []string{}}, team("WORKSPACE_MANAGE_ALL"), team("WORKSPACE_INVOKE"),
			team("WORKSPACE_EXPORT_METRICS"), {Type: "WORKSPACE_MANAGE_API_KEYS", Workspace: true, Teams: []string{}},
		}},
		{"key-management key", snapshot.WorkspaceAPIKey{Type: "WORKSPACE_MANAGE_API_KEYS"}, []KeyCreate{
			team("WORKSPACE_MANAGE_ALL"), team("WORKSPACE_INVOKE"), team("WORKSPACE_EXPORT_METRICS"),
		}},
		{"member, admin of red", snapshot.WorkspaceAPIKey{Type: "PERSONAL", Owner: &snapshot.KeyOwner{UserID: "tia", Role: "MEMBER"}}, []KeyCreate{
			{Type: "PERSONAL", Workspace: true, Teams: []string{}},
			{Type: "WORKSPACE_MANAGE_ALL", Teams: []string{"red"}}, {Type: "WORKSPACE_INVOKE", Teams: []string{"red"}},
			{Type: "WORKSPACE_EXPORT_METRICS", Teams: []string{"red"}},
		}},
		{"WORKSPACE_MANAGE_ALL", snapshot.WorkspaceAPIKey{Type: "WORKSPACE_MANAGE_ALL"}, []KeyCreate{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := keyCreate(auth.NewCaller("ws", tc.key, teams))
			for i := range got {
				// Where a key may be created is this test's; the scope fields are TestKeyCreateCarriesTheTypesRule's.
				got[i].Team, got[i].Models, got[i].ModelsAlone, got[i].Environments = false, false, false, false
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("key_create = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// docs/rest-api.md "Workspace keys and teams": PERSONAL and WORKSPACE_MANAGE_API_KEYS keys take no team and no
// scope; WORKSPACE_MANAGE_ALL keys are scoped by environments, with models only together with them;
// WORKSPACE_INVOKE keys by models, environments or both; WORKSPACE_EXPORT_METRICS keys by models only. The
// dashboard's key form offers exactly these fields.
func TestKeyCreateCarriesTheTypesRule(t *testing.T) {
	admin := snapshot.WorkspaceAPIKey{Type: "PERSONAL", Owner: &snapshot.KeyOwner{UserID: "ada", Role: "ADMIN"}}
	type scope struct{ team, models, modelsAlone, environments bool }
	want := map[string]scope{
		"PERSONAL":                  {},
		"WORKSPACE_MANAGE_ALL":      {team: true, models: true, environments: true},
		"WORKSPACE_INVOKE":          {team: true, models: true, modelsAlone: true, environments: true},
		"WORKSPACE_EXPORT_METRICS":  {team: true, models: true, modelsAlone: true},
		"WORKSPACE_MANAGE_API_KEYS": {},
	}
	got := keyCreate(auth.NewCaller("ws", admin, &snapshot.Snapshot{}))
	if len(got) != len(want) {
		t.Fatalf("key_create lists %d types, want %d: %+v", len(got), len(want), got)
	}
	for _, kc := range got {
		if s := (scope{kc.Team, kc.Models, kc.ModelsAlone, kc.Environments}); s != want[kc.Type] {
			t.Errorf("%s: team, models, models alone, environments = %+v, want %+v", kc.Type, s, want[kc.Type])
		}
	}
}

// loginReplica is the sign-in route of one gatewayd replica over e's keys and clock, counting failed sign-ins in
// windows.
func loginReplica(t *testing.T, e *env, windows limits.Windows) *env {
	t.Helper()
	s, err := NewSessions(SessionOptions{Lookup: auth.ViewLookup(func() *view.View { return e.cur.Load() }), Now: e.clock.Now, Limits: windows})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	r := &env{t: t, clock: e.clock, srv: httptest.NewServer(mux)}
	t.Cleanup(r.srv.Close)
	return r
}

func (e *env) tryLogin(key string) answer {
	e.t.Helper()
	return e.do("POST", "/dashboard/api/login", `{"api_key":"`+key+`"}`, map[string]string{"Sec-Fetch-Site": "same-origin"})
}

// expectThrottled checks a 429 in the envelope that says when to retry, in Retry-After and in detail.
func expectThrottled(t *testing.T, a answer, limit string, retryAfter int) {
	t.Helper()
	var body struct {
		Error     string         `json:"error"`
		ErrorCode string         `json:"error_code"`
		Detail    map[string]any `json:"detail"`
	}
	if a.status != http.StatusTooManyRequests || json.Unmarshal([]byte(a.body), &body) != nil {
		t.Fatalf("sign-in: %d %s, want 429", a.status, a.body)
	}
	if a.header.Get("Retry-After") != strconv.Itoa(retryAfter) || body.ErrorCode != "rate_limited" ||
		body.Detail["retry_after"] != float64(retryAfter) || body.Detail["limit"] != limit || !strings.Contains(body.Error, "try again in") {
		t.Fatalf("429: Retry-After %q, body %s; want %d s and limit %s", a.header.Get("Retry-After"), a.body, retryAfter, limit)
	}
	if a.header.Get("Set-Cookie") != "" {
		t.Fatal("a throttled sign-in set a cookie")
	}
}

// TestFailedLoginsAreThrottled: failed sign-ins are limited per key prefix and per client address
// (docs/security.md "Dashboard sign-in is throttled"); a full window refuses even the right key, with a 429 that
// says when to retry, and the next window signs in again. Two replicas on one Redis share the count.
func TestFailedLoginsAreThrottled(t *testing.T) {
	base := newEnv(t)
	rdb := redistest.Start(t)
	a := loginReplica(t, base, limits.NewRedisWindows(rdb.Client(), "", logr.Discard()))
	b := loginReplica(t, base, limits.NewRedisWindows(rdb.Client(), "", logr.Discard()))
	base.clock.Step(20 * time.Second) // 40 s left in the minute's window

	wrong := base.adminRec.Prefix + ".not-the-secret"
	for i := range LoginFailuresPerKey {
		if r := []*env{a, b}[i%2].tryLogin(wrong); r.status != http.StatusUnauthorized {
			t.Fatalf("failed sign-in %d: %d %s", i+1, r.status, r.body)
		}
	}
	expectThrottled(t, b.tryLogin(base.admin), "key_prefix", 40)
	expectThrottled(t, a.tryLogin(base.admin), "key_prefix", 40)
	if r := a.tryLogin(base.other); r.status != http.StatusOK {
		t.Fatalf("another key from the same address: %d %s", r.status, r.body)
	}

	base.clock.Step(time.Minute)
	if r := b.tryLogin(base.admin); r.status != http.StatusOK {
		t.Fatalf("the next window: %d %s", r.status, r.body)
	}

	base.clock.Step(time.Minute)
	for i := range LoginFailuresPerAddress {
		// A prefix of its own each time: only the address's count fills.
		if r := []*env{a, b}[i%2].tryLogin(fmt.Sprintf("mgw_guess%07d.secret", i)); r.status != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %s", i+1, r.status, r.body)
		}
	}
	expectThrottled(t, a.tryLogin(base.other), "client_address", 40)
}
