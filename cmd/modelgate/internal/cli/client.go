package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/version"
)

// Client calls gatewayd with one workspace key. It is the CLI's own small client: it knows the error envelope
// (gatewayd/httperr) and the management 429, and nothing of the server's handlers.
type Client struct {
	BaseURL string
	APIKey  string
	HTTP    *http.Client
	// Wait, when set, answers a 429 by waiting its retry_after (or Retry-After) once and sending again, when
	// that is at most MaxWait (and at most MaxWaitLimit whatever MaxWait says).
	Wait bool
	// MaxWait bounds what Wait waits: a 429 asking for longer is answered at once. Zero is MaxWaitLimit.
	MaxWait time.Duration
	// Notice receives what the client tells a person while it waits; nil says nothing.
	Notice io.Writer
	// Sleep waits; nil is time.Sleep with the context's cancellation.
	Sleep func(context.Context, time.Duration) error
}

// Request is one call. Body is sent as is (it may be sent twice, after a 429).
type Request struct {
	Method      string
	Path        string // starts with "/"; already escaped
	Query       url.Values
	Body        []byte
	ContentType string // default application/json when Body is set
	Header      http.Header
}

// Response is a 2xx answer, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// APIError is an answer outside 2xx: the envelope {error, error_code, detail} of docs/rest-api.md "Errors", or
// the management 429 {error, retry_after}.
type APIError struct {
	Status     int
	Code       string
	Message    string
	Detail     any
	RetryAfter int
	Raw        []byte
}

// Error prints the status and code, the server's sentence, and then the detail: one line per refused field
// ("field: rule"), or the detail's own fields.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.Status)
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", printable(e.Code))
	}
	msg := e.Message
	if msg == "" {
		msg = strings.TrimSpace(string(e.Raw))
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	fmt.Fprintf(&b, ": %s", printable(msg))
	for _, line := range detailLines(e.Detail) {
		b.WriteString("\n  " + printable(line))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, "\n  retry after %ds (--wait waits once and retries)", e.RetryAfter)
	}
	return b.String()
}

// detailLines renders an envelope's detail: a list of {field, message} (the management API), one such object
// (async bodies), or any other object key by key (the 429's limit, the caller's key_type, the teams to choose).
func detailLines(d any) []string {
	switch v := d.(type) {
	case nil:
		return nil
	case string:
		if v == "" {
			return nil
		}
		return []string{v}
	case []any:
		var out []string
		for _, item := range v {
			out = append(out, detailLines(item)...)
		}
		return out
	case map[string]any:
		if f, ok := v["field"].(string); ok {
			if m, ok := v["message"].(string); ok && len(v) == 2 {
				// "x is required." under field x reads "x: is required.", not "x: x is required.".
				rule := strings.TrimLeft(strings.TrimPrefix(m, f), ": ")
				if rule == "" || rule == m {
					rule = m
				}
				return []string{f + ": " + rule}
			}
		}
		out := make([]string, 0, len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			out = append(out, k+": "+cell(v[k]))
		}
		return out
	default:
		return []string{cell(v)}
	}
}

// MaxWaitLimit is the longest --wait ever waits on a 429, whatever the server asks and whatever --timeout says
// (docs/security.md "The CLI trusts its server only so far").
const MaxWaitLimit = 15 * time.Minute

// Do sends r and returns its 2xx answer, or an *APIError. On a 429 with Wait set it waits once, as long as the
// answer says, and sends again; when the answer asks for longer than MaxWait, it waits not at all and returns the
// 429 with a line that says so.
func (c *Client) Do(ctx context.Context, r Request) (*Response, error) {
	resp, err := c.send(ctx, r)
	if err == nil || !c.Wait {
		return resp, err
	}
	apiErr, ok := err.(*APIError)
	if !ok || apiErr.Status != http.StatusTooManyRequests {
		return nil, err
	}
	limit := MaxWaitLimit
	if c.MaxWait > 0 && c.MaxWait < limit {
		limit = c.MaxWait
	}
	// Compared in seconds: a huge retry_after would overflow a Duration.
	if apiErr.RetryAfter > int(limit/time.Second) {
		return nil, &waitRefused{apiErr, limit}
	}
	wait := time.Duration(max(apiErr.RetryAfter, 1)) * time.Second
	if c.Notice != nil {
		fmt.Fprintf(c.Notice, "Rate limited; waiting %s, then trying once more.\n", wait)
	}
	sleep := c.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	if err := sleep(ctx, wait); err != nil {
		return nil, err
	}
	return c.send(ctx, r)
}

// waitRefused is a 429 that asked for a longer wait than --wait waits.
type waitRefused struct {
	*APIError
	limit time.Duration
}

func (e *waitRefused) Error() string {
	return fmt.Sprintf("%s\n  not waiting: --wait waits at most %s here (--timeout, and never more than %s)",
		e.APIError.Error(), e.limit, MaxWaitLimit)
}

func (e *waitRefused) Unwrap() error { return e.APIError }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) send(ctx context.Context, r Request) (*Response, error) {
	u := c.BaseURL + r.Path
	if len(r.Query) > 0 {
		u += "?" + r.Query.Encode()
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, body)
	if err != nil {
		return nil, fmt.Errorf("failed to build %s %s: %w", r.Method, u, err)
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if r.Body != nil {
		ct := r.ContentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	req.Header.Set("User-Agent", "modelgate-cli/"+version.Version)
	hc := http.Client{}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	hc.CheckRedirect = sameOrigin
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s failed: %w", r.Method, u, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("failed to read the answer of %s %s: %w", r.Method, u, err)
	}
	if resp.StatusCode/100 == 2 {
		return &Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}, nil
	}
	return nil, parseError(resp.StatusCode, resp.Header, raw)
}

// maxRedirects is as many redirects as net/http follows.
const maxRedirects = 10

// sameOrigin follows a redirect only to the scheme, host and port of the first request: the key in Authorization,
// and a body that may hold credentials (a docker config), never go to another origin. net/http would send
// Authorization to another port or scheme of the same host, and to its subdomains.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if from, to := origin(via[0].URL), origin(req.URL); from != to {
		return fmt.Errorf("the server redirected to %s, another origin than %s: the CLI sends its key only to the URL it logged in to (log in with the other URL if it is the server)", printable(to), printable(from))
	}
	return nil
}

// origin is u's scheme, host and port, the port spelled out when the scheme's default.
func origin(u *url.URL) string {
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// parseError reads a refusal. Retry-After fills RetryAfter when the body has no retry_after.
func parseError(status int, h http.Header, raw []byte) *APIError {
	e := &APIError{Status: status, Raw: raw}
	var body struct {
		httperr.Body
		RetryAfter int `json:"retry_after"`
		// Fields is the structure of a model-call error, whose detail is its one-line string.
		Fields any `json:"fields"`
	}
	if json.Unmarshal(raw, &body) == nil {
		e.Code, e.Message, e.Detail, e.RetryAfter = body.ErrorCode, body.Error, body.Detail, body.RetryAfter
		if body.Fields != nil {
			e.Detail = body.Fields
		}
	}
	if e.RetryAfter <= 0 {
		if n, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After"))); err == nil && n > 0 {
			e.RetryAfter = n
		}
	}
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		e.RetryAfter = 0
	}
	return e
}

// Exit codes. Scripts can tell a refused input from a missing object, a key that may not act, and a server
// that could not answer.
const (
	ExitOK          = 0
	ExitError       = 1 // anything else: a network failure, a file that cannot be read, an unexpected answer
	ExitUsage       = 2 // a flag or argument the CLI itself refuses
	ExitInvalid     = 3 // 400, 409, 413, 422: the server refused the input (the message names the field and rule)
	ExitAuth        = 4 // 401, 403: no key, an unknown or revoked key, or a key that may not do this
	ExitNotFound    = 5 // 404
	ExitRateLimited = 6 // 429 (after waiting once with --wait)
	ExitUnavailable = 7 // 5xx
)

// exitCode is the process exit code for an answer's status.
func exitCode(status int) int {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ExitAuth
	case status == http.StatusNotFound:
		return ExitNotFound
	case status == http.StatusTooManyRequests:
		return ExitRateLimited
	case status >= 500:
		return ExitUnavailable
	case status >= 400:
		return ExitInvalid
	}
	return ExitError
}
