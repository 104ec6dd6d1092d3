package loadbench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/test/upstream"
)

// TestMissingPeerIsSkipped checks that a peer whose program is not there is reported as not run, with the
// reason on its rows, and does not fail the run.
func TestMissingPeerIsSkipped(t *testing.T) {
	u, err := startUpstreams(QuickConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	ctx := context.Background()
	missing := PeerPaths{Nginx: filepath.Join(t.TempDir(), "no-nginx"), Node: filepath.Join(t.TempDir(), "no-node"), PortkeyDir: t.TempDir()}
	notRun := map[string]error{}
	if _, err := startNginx(ctx, missing, u); !errors.Is(err, errNotInstalled) {
		t.Fatalf("startNginx with no binary: %v, want errNotInstalled", err)
	} else {
		notRun["nginx"] = err
	}
	missing.Node = "" // node may be installed: Portkey's package is what is missing
	if _, err := startPortkey(ctx, missing, u); !errors.Is(err, errNotInstalled) {
		t.Fatalf("startPortkey with no package: %v, want errNotInstalled", err)
	} else {
		notRun["Portkey"] = err
	}

	rep := &Report{}
	rep.addPeers(QuickConfig(), newRounds(3), map[string]int{}, notRun, nil)
	for _, name := range []string{"nginx", "Portkey"} {
		row, ok := rep.Row("throughput gatewayd ÷ " + name)
		if !ok {
			t.Fatalf("no throughput row for %s", name)
		}
		if row.Verdict != NotRun || !strings.Contains(row.Value, "not installed") {
			t.Errorf("%s row = %q %q, want not run with a message saying it is not installed", name, row.Verdict, row.Value)
		}
	}
	if rep.Failed() {
		t.Errorf("a missing peer failed the run: %v", rep.Errors)
	}

	// A peer that is installed but does not start is a failed phase, not a silent skip.
	rep = &Report{}
	rep.addPeers(QuickConfig(), newRounds(3), map[string]int{}, map[string]error{"nginx": errors.New("nginx exited before it listened")}, nil)
	if !rep.Failed() {
		t.Error("a peer that could not start did not fail the run")
	}
}

// TestPeerChecksCatchBrokenBody checks that the checks every peer's answers go through catch an answer whose
// status and usage are right but whose content is not the upstream's, plain and streamed.
func TestPeerChecksCatchBrokenBody(t *testing.T) {
	cfg := QuickConfig()
	plain := upstream.New(upstream.Options{CompletionTokens: completionTokens})
	defer plain.Close()
	paced := upstream.New(upstream.Options{CompletionTokens: completionTokens, StreamDeltas: cfg.StreamDeltas})
	defer paced.Close()
	want := expect(cfg)
	rewrite := func(to, old, repl string) string {
		u, _ := url.Parse(to)
		p := httputil.NewSingleHostReverseProxy(u)
		p.ModifyResponse = func(resp *http.Response) error {
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			b = bytes.ReplaceAll(b, []byte(old), []byte(repl))
			resp.Body = io.NopCloser(bytes.NewReader(b))
			resp.ContentLength = int64(len(b))
			resp.Header.Del("Content-Length")
			return nil
		}
		s := httptest.NewServer(p)
		t.Cleanup(s.Close)
		return s.URL + "/v1/chat/completions"
	}
	for _, tc := range []struct {
		name   string
		url    string
		stream bool
	}{
		{"plain content changed", rewrite(plain.URL, `"tok tok tok "`, `"tok tok tik "`), false},
		{"stream chunk text changed", rewrite(paced.URL, `"tok3 "`, `"tok9 "`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &Violations{}
			peer := &Target{Name: "peer", URL: tc.url, Auth: "Bearer x", Model: "echo", StreamModel: "echo",
				Header: http.Header{"X-Portkey-Provider": {"openai"}}}
			res := Drive(context.Background(), peer, 2, 50*time.Millisecond, tc.stream, want, v)
			if res.Requests == 0 {
				t.Fatalf("no answer completed: %v", v.Examples())
			}
			if v.Body.Load() == 0 {
				t.Fatalf("broken body not caught: %s", v.String())
			}
			if v.Status.Load()+v.Tokens.Load()+v.Chunks.Load() != 0 {
				t.Errorf("only the body was broken, yet: %s", v.String())
			}
		})
	}
	t.Run("unchanged", func(t *testing.T) {
		v := &Violations{}
		for _, stream := range []bool{false, true} {
			u := plain.BaseURL()
			if stream {
				u = paced.BaseURL()
			}
			Drive(context.Background(), &Target{Name: "direct", URL: u + "/chat/completions", Auth: "Bearer x", Model: "echo", StreamModel: "echo"},
				2, 50*time.Millisecond, stream, want, v)
		}
		if v.Total() != 0 {
			t.Fatalf("correct answers flagged: %s %v", v.String(), v.Examples())
		}
	})
}

// TestPeersPassChecks runs the installed peers in front of the fake upstreams and drives them through the
// checks; a peer that is not installed is skipped with the reason.
func TestPeersPassChecks(t *testing.T) {
	cfg := QuickConfig()
	u, err := startUpstreams(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	ctx := context.Background()
	for _, start := range []struct {
		name string
		f    func(context.Context, PeerPaths, *upstreams) (*peer, error)
	}{{"nginx", startNginx}, {"Portkey", startPortkey}} {
		t.Run(start.name, func(t *testing.T) {
			p, err := start.f(ctx, PeerPaths{}, u)
			if errors.Is(err, errNotInstalled) {
				t.Skipf("%s: %v", start.name, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.stop()
			v := &Violations{}
			want := expect(cfg)
			if r := Drive(ctx, p.plain, 4, 200*time.Millisecond, false, want, v); r.Requests == 0 {
				t.Fatalf("no plain answer: %v", v.Examples())
			}
			if r := Drive(ctx, p.stream, 2, 200*time.Millisecond, true, want, v); r.Requests == 0 {
				t.Fatalf("no stream completed: %v", v.Examples())
			}
			if v.Total() != 0 {
				t.Fatalf("%s broke the checks: %s %v", start.name, v.String(), v.Examples())
			}
		})
	}
}
