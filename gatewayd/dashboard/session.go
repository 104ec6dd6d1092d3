package dashboard

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/api/ids"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/sessions"
)

// CookieName is the session cookie. The __Host- prefix makes the browser refuse it unless it is Secure, has
// Path=/ and no Domain, so no sibling host can plant or widen it.
const CookieName = "__Host-modelgate_session"

// Defaults of SessionOptions.
const (
	DefaultIdleTimeout     = 30 * time.Minute
	DefaultAbsoluteTimeout = 12 * time.Hour
	// refreshEvery bounds how often a session's last-seen time is re-sealed into a fresh cookie.
	refreshEvery = time.Minute
	// Failed sign-ins are limited per key prefix and per client address, in fixed windows of a minute
	// (docs/security.md "Dashboard sign-in is throttled").
	LoginFailuresPerKey     = 5
	LoginFailuresPerAddress = 20
	LoginFailureWindow      = time.Minute
	// minSecretBytes is the shortest sealing secret accepted.
	minSecretBytes = 32
	sealInfo       = "modelgate dashboard session v1"
)

// SessionOptions configure Sessions.
type SessionOptions struct {
	// Secrets is the key ring of sealing secrets, each at least 32 bytes: the first seals new cookies, every one
	// opens them, so a secret can be rotated in (put first) and the old one dropped after AbsoluteTimeout. One
	// random secret, good for this process only, when empty.
	Secrets [][]byte
	// Lookup authenticates the session's workspace key on every request, against the view in force, so revoking
	// the key ends the session at the next request.
	Lookup auth.Lookup
	// Now is the clock of the timeouts; time.Now when nil.
	Now func() time.Time
	// IdleTimeout ends a session unused this long; DefaultIdleTimeout when zero.
	IdleTimeout time.Duration
	// AbsoluteTimeout ends a session this long after login, used or not; DefaultAbsoluteTimeout when zero.
	AbsoluteTimeout time.Duration
	// Logger records sign-ins and sessions ended by a revoked key (key prefixes only); discarded when zero.
	Logger logr.Logger
	// Store keeps which sessions are live, server side: signing out ends a session there, so its cookie is
	// refused at once by every replica sharing the store. This process's memory when nil.
	Store sessions.Store
	// Limits counts failed sign-ins (the management API's windows: on Redis every replica shares the count).
	// This process's memory when nil.
	Limits limits.Windows
}

// Sessions exchanges workspace keys for sealed session cookies and lets those cookies authenticate the
// management routes of /v1.
type Sessions struct {
	opts  SessionOptions
	aeads []cipher.AEAD
	cop   *http.CrossOriginProtection
}

// session is what the sealed cookie holds. The key's plaintext is needed to authenticate it on every request
// through the same lookup a Bearer call uses; it never reaches JavaScript (HttpOnly) and is opaque without the
// sealing secret.
type session struct {
	// ID is the session's random id; the sessions.Store holds its SHA-256.
	ID       string `json:"sid"`
	Key      string `json:"k"`
	IssuedAt int64  `json:"iat"`
	SeenAt   int64  `json:"seen"`
}

// NewSessions checks opts and derives the sealing keys.
func NewSessions(opts SessionOptions) (*Sessions, error) {
	if opts.Lookup == nil {
		return nil, errors.New("dashboard sessions need a workspace key lookup")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Store == nil {
		opts.Store = sessions.NewMemory()
	}
	if opts.Limits == nil {
		opts.Limits = limits.NewMemoryWindows()
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.AbsoluteTimeout <= 0 {
		opts.AbsoluteTimeout = DefaultAbsoluteTimeout
	}
	if len(opts.Secrets) == 0 {
		s := make([]byte, minSecretBytes)
		_, _ = rand.Read(s)
		opts.Secrets = [][]byte{s}
	}
	s := &Sessions{opts: opts, cop: http.NewCrossOriginProtection()}
	for i, secret := range opts.Secrets {
		if len(secret) < minSecretBytes {
			return nil, fmt.Errorf("dashboard session secret %d has %d bytes; at least %d are needed", i, len(secret), minSecretBytes)
		}
		key, err := hkdf.Key(sha256.New, secret, nil, sealInfo, 32)
		if err != nil {
			return nil, fmt.Errorf("failed to derive the dashboard session key %d: %w", i, err)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		s.aeads = append(s.aeads, aead)
	}
	return s, nil
}

// ReadSecrets reads a key ring file: one secret a line, newest first; blank lines and # comments are skipped.
func ReadSecrets(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read the dashboard session secrets: %w", err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, []byte(line))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the dashboard session secrets file %s holds no secret", path)
	}
	return out, nil
}

// Register adds the login routes to mux.
func (s *Sessions) Register(mux ingress.Mux) {
	mux.HandleFunc("POST /dashboard/api/login", s.login)
	mux.HandleFunc("POST /dashboard/api/logout", s.logout)
}

type loginRequest struct {
	APIKey string `json:"api_key"`
}

// Who is the answer of a login and of GET /dashboard/api/session: the key the session acts as.
type Who struct {
	Namespace string `json:"namespace"`
	KeyPrefix string `json:"key_prefix"`
	KeyType   string `json:"key_type"`
	KeyName   string `json:"key_name"`
	ExpiresAt string `json:"expires_at"`
	// Can says which screens the key may use, as gatewayd/authz.Decide answers for its principal, so the app
	// offers only those. The API still judges every call.
	Can Can `json:"can"`
}

// Can is what a session's key may do, by screen.
type Can struct {
	Gateway bool `json:"gateway"`
	Keys    bool `json:"keys"`
	Models  bool `json:"models"`
	// KeyCreate lists the workspace-key types the key may create and where (authz.ActionKeyCreate); empty when it
	// may create none. Each listed key's rename and revoke come with the key list (GET /v1/api_keys, `can`).
	KeyCreate []KeyCreate `json:"key_create"`
}

// KeyCreate is where a session's key may create workspace keys of Type: workspace-wide, for any team, or for the
// teams named (those it is a Team ADMIN of); and which scope fields such a key takes, from the type's rule
// (api/v1alpha1.KeyTypeRules), so that the dashboard's form holds no copy of the rules.
type KeyCreate struct {
	Type      string   `json:"type"`
	Workspace bool     `json:"workspace"`
	AnyTeam   bool     `json:"any_team"`
	Teams     []string `json:"teams"`
	// Team: the key belongs to a team (team_id). Models: model_ids may scope it; ModelsAlone: without environments
	// too (else only together with them). Environments: environments may scope it.
	Team         bool `json:"team"`
	Models       bool `json:"models"`
	ModelsAlone  bool `json:"models_alone"`
	Environments bool `json:"environments"`
}

// keyCreate asks authz.Decide, for each type, whether c may create such a key for the whole workspace, for a team
// it has no role in (then for any team), or else for each team it has a role in. PERSONAL and
// WORKSPACE_MANAGE_API_KEYS keys have no team (docs/rest-api.md), so only the workspace is asked for them.
func keyCreate(c auth.Caller) []KeyCreate {
	p := c.Principal()
	out := []KeyCreate{}
	if !c.Decide(authz.ActionKeySee, authz.Resource{}).Allowed {
		return out
	}
	roleTeams := make([]string, 0, len(p.TeamRoles))
	for t := range p.TeamRoles {
		roleTeams = append(roleTeams, t)
	}
	slices.Sort(roleTeams)
	for _, t := range gatewayv1.KeyTypes {
		may := func(team string) bool {
			return c.Decide(authz.ActionKeyCreate, authz.Resource{KeyType: t, TeamID: team}).Allowed
		}
		rule := gatewayv1.KeyTypeRules[t]
		kc := KeyCreate{Type: string(t), Workspace: may(""), Teams: []string{}, Team: rule.Team,
			Models: rule.ModelsAlone || rule.Environments, ModelsAlone: rule.ModelsAlone, Environments: rule.Environments}
		if rule.Team {
			// A team id that cannot exist (not a valid name) stands for a team the key has no role in.
			kc.AnyTeam = may("-no-role-")
			if !kc.AnyTeam {
				for _, team := range roleTeams {
					if may(team) {
						kc.Teams = append(kc.Teams, team)
					}
				}
			}
		}
		if kc.Workspace || kc.AnyTeam || len(kc.Teams) > 0 {
			out = append(out, kc)
		}
	}
	return out
}

// maxLoginBody caps a login's body: {"api_key": ...} and nothing more.
const maxLoginBody = 4 << 10

func (s *Sessions) login(w http.ResponseWriter, r *http.Request) {
	if err := s.cop.Check(r); err != nil {
		crossOrigin(w)
		return
	}
	if e := ingress.Limit(w, r, maxLoginBody); e != nil {
		httperr.WriteError(w, e)
		return
	}
	var req loginRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		badKey(w, http.StatusBadRequest, httperr.CodeMalformedJSON, "Send a JSON body {\"api_key\": \"<prefix>.<secret>\"}.")
		return
	}
	key := strings.TrimSpace(req.APIKey)
	if key == "" {
		badKey(w, http.StatusBadRequest, httperr.CodeInvalidRequest, "api_key is required.")
		return
	}
	now := s.opts.Now()
	// A full window refuses before the key is looked at, so a right key is refused too: the answer tells nothing.
	buckets := loginBuckets(r, key)
	for _, b := range buckets {
		if full, wait := s.opts.Limits.Full(r.Context(), b.name, b.n, LoginFailureWindow, now); full {
			s.opts.Logger.V(1).Info("Dashboard sign-in throttled", "keyPrefix", prefixOf(key), "limit", b.what)
			loginThrottled(w, wait, b.what)
			return
		}
	}
	c, ok := s.opts.Lookup(key)
	if !ok {
		for _, b := range buckets {
			s.opts.Limits.Take(r.Context(), b.name, b.n, LoginFailureWindow, now)
		}
		badKey(w, http.StatusUnauthorized, httperr.CodeUnauthorized, "Unknown or revoked API key.")
		return
	}
	s.opts.Logger.Info("Dashboard sign-in", "namespace", c.Namespace, "keyPrefix", c.Key.Prefix, "keyType", c.Key.Type)
	sess := session{ID: ids.New(ids.DashboardSession), Key: key, IssuedAt: now.Unix(), SeenAt: now.Unix()}
	if err := s.opts.Store.Start(r.Context(), storeID(sess.ID), now, s.opts.AbsoluteTimeout); err != nil {
		s.opts.Logger.Error(err, "Dashboard sign-in refused: the session store is unavailable")
		storeUnavailable(w)
		return
	}
	s.setCookie(w, sess)
	httperr.WriteJSON(w, http.StatusOK, s.who(c, sess))
}

// loginBucket is one count of failed sign-ins: what it counts by, its bucket in the limits.Windows, its limit.
type loginBucket struct {
	what, name string
	n          int
}

// loginBuckets are the counts a sign-in with key from r falls in: its key prefix's and its client address's (the
// connection's peer: behind a proxy, the proxy's).
func loginBuckets(r *http.Request, key string) [2]loginBucket {
	addr, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		addr = r.RemoteAddr
	}
	return [2]loginBucket{
		{what: "key_prefix", name: "dashboard-login key " + prefixOf(key), n: LoginFailuresPerKey},
		{what: "client_address", name: "dashboard-login addr " + addr, n: LoginFailuresPerAddress},
	}
}

// loginThrottled answers 429 in the envelope, with the whole seconds until the window ends (rounded up, at least
// 1) in Retry-After and in detail, and which limit refused.
func loginThrottled(w http.ResponseWriter, wait time.Duration, what string) {
	secs := max(int64((wait+time.Second-1)/time.Second), 1)
	e := httperr.New(http.StatusTooManyRequests, httperr.CodeRateLimited,
		fmt.Sprintf("Too many failed sign-ins; try again in %d seconds.", secs), map[string]any{"retry_after": secs, "limit": what})
	e.RetryAfter = secs
	httperr.WriteError(w, e)
}

// logout ends the session in the sessions.Store, so its cookie is refused everywhere from now on, even a copy kept
// elsewhere, and clears the cookie.
func (s *Sessions) logout(w http.ResponseWriter, r *http.Request) {
	if err := s.cop.Check(r); err != nil {
		crossOrigin(w)
		return
	}
	clearCookie(w)
	if ck, err := r.Cookie(CookieName); err == nil {
		if sess, msg := s.open(ck.Value); msg == "" {
			if err := s.opts.Store.End(r.Context(), storeID(sess.ID)); err != nil {
				s.opts.Logger.Error(err, "Dashboard sign-out failed: the session store is unavailable", "keyPrefix", prefixOf(sess.Key))
				storeUnavailable(w)
				return
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Sessions) who(c auth.Caller, sess session) Who {
	return Who{
		Namespace: c.Namespace, KeyPrefix: c.Key.Prefix, KeyType: c.Key.Type, KeyName: c.Key.Name,
		ExpiresAt: time.Unix(sess.IssuedAt, 0).Add(s.opts.AbsoluteTimeout).UTC().Format(time.RFC3339),
		Can: Can{
			Gateway:   c.Decide(authz.ActionManageGateway, authz.Resource{}).Allowed,
			Keys:      c.Decide(authz.ActionKeySee, authz.Resource{}).Allowed,
			Models:    c.Decide(authz.ActionListModels, authz.Resource{}).Allowed,
			KeyCreate: keyCreate(c),
		},
	}
}

// Wrap lets the session cookie authenticate the routes CookieRoute names, as the session's key: a request that
// carries the cookie and no Authorization header passes http.CrossOriginProtection, then its session is opened,
// timed and its key looked up again, and the request goes on with that key as its Bearer credential, so the
// management API and authz.Decide treat it exactly as a call with the key. Every other request, model calls
// included, goes on untouched: the cookie means nothing to them.
func (s *Sessions) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" || !CookieRoute(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		ck, err := r.Cookie(CookieName)
		if err != nil {
			if r.URL.Path == "/dashboard/api/session" {
				// Not signed in is an answer, not an error: the app shows its login form.
				w.Header().Set("Cache-Control", "no-store")
				w.WriteHeader(http.StatusNoContent)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if err := s.cop.Check(r); err != nil {
			crossOrigin(w)
			return
		}
		sess, msg := s.open(ck.Value)
		if msg != "" {
			clearCookie(w)
			httperr.Write(w, http.StatusUnauthorized, httperr.CodeUnauthorized, msg, nil)
			return
		}
		live, err := s.opts.Store.Live(r.Context(), storeID(sess.ID), s.opts.Now())
		switch {
		case err != nil:
			s.opts.Logger.Error(err, "Dashboard session refused: the session store is unavailable")
			storeUnavailable(w)
			return
		case !live:
			clearCookie(w)
			httperr.Write(w, http.StatusUnauthorized, httperr.CodeUnauthorized, "Your dashboard session has ended (signed out); sign in again.", nil)
			return
		}
		c, ok := s.opts.Lookup(sess.Key)
		if !ok {
			s.opts.Logger.Info("Dashboard session ended: its key is unknown or revoked", "keyPrefix", prefixOf(sess.Key))
			clearCookie(w)
			httperr.Write(w, http.StatusUnauthorized, httperr.CodeUnauthorized, "Unknown or revoked API key: the session has ended.", nil)
			return
		}
		now := s.opts.Now()
		if now.Sub(time.Unix(sess.SeenAt, 0)) >= refreshEvery {
			sess.SeenAt = now.Unix()
			s.setCookie(w, sess)
		}
		if r.URL.Path == "/dashboard/api/session" {
			httperr.WriteJSON(w, http.StatusOK, s.who(c, sess))
			return
		}
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+sess.Key)
		next.ServeHTTP(w, r)
	})
}

// CookieRoute reports whether the session cookie authenticates path: the management routes of /v1 and the
// dashboard's own session route. Model calls (/v1/chat/completions, /v1/completions, /v1/embeddings, /models/...)
// never accept it.
func CookieRoute(p string) bool {
	for _, pre := range []string{"/v1/gateway/", "/v1/api_keys", "/v1/teams", "/v1/models"} {
		if p == pre || strings.HasPrefix(p, strings.TrimSuffix(pre, "/")+"/") {
			return true
		}
	}
	return p == "/dashboard/api/session"
}

// open unseals a cookie value and checks its timeouts; msg says why it is refused.
func (s *Sessions) open(v string) (session, string) {
	const ended = "Your dashboard session has ended; sign in again."
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return session{}, ended
	}
	for _, aead := range s.aeads {
		ns := aead.NonceSize()
		if len(raw) < ns {
			break
		}
		plain, err := aead.Open(nil, raw[:ns], raw[ns:], []byte(CookieName))
		if err != nil {
			continue
		}
		var sess session
		if json.Unmarshal(plain, &sess) != nil || sess.Key == "" || sess.ID == "" {
			return session{}, ended
		}
		now := s.opts.Now()
		if now.Sub(time.Unix(sess.IssuedAt, 0)) >= s.opts.AbsoluteTimeout {
			return session{}, "Your dashboard session has expired; sign in again."
		}
		if now.Sub(time.Unix(sess.SeenAt, 0)) >= s.opts.IdleTimeout {
			return session{}, "Your dashboard session timed out after inactivity; sign in again."
		}
		return sess, ""
	}
	return session{}, ended
}

func (s *Sessions) seal(sess session) string {
	plain, _ := json.Marshal(sess)
	aead := s.aeads[0]
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, []byte(CookieName)))
}

func (s *Sessions) setCookie(w http.ResponseWriter, sess session) {
	expires := time.Unix(sess.IssuedAt, 0).Add(s.opts.AbsoluteTimeout)
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: s.seal(sess), Path: "/", Expires: expires,
		MaxAge: max(1, int(expires.Sub(s.opts.Now()).Seconds())),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	w.Header().Set("Cache-Control", "no-store")
}

// storeID is what the sessions.Store holds of a session id: its SHA-256, so the store never holds a cookie's part.
func storeID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

func storeUnavailable(w http.ResponseWriter) {
	httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "The dashboard session store is unavailable; try again shortly.", nil)
}

// prefixOf is the lookup prefix of a key, the most of it that may be logged.
func prefixOf(key string) string {
	if len(key) > 16 {
		return key[:16]
	}
	return key
}

func clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

func crossOrigin(w http.ResponseWriter) {
	httperr.Write(w, http.StatusForbidden, httperr.CodeForbidden, "Cross-origin request refused: the dashboard session only works from the dashboard's own origin.", nil)
}

func badKey(w http.ResponseWriter, status int, code, msg string) {
	httperr.Write(w, status, code, msg, []httperr.FieldError{{Field: "api_key", Message: msg}})
}
