package gatewayd_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/upstream"
)

// countingListener counts the writes gatewayd makes on each connection it accepts, by local port of the client.
type countingListener struct {
	net.Listener
	mu     sync.Mutex
	writes map[string]*int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := new(int)
	l.mu.Lock()
	l.writes[c.RemoteAddr().String()] = n
	l.mu.Unlock()
	return &countingConn{Conn: c, l: l, n: n}, nil
}

func (l *countingListener) count(client string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.writes[client]; n != nil {
		return *n
	}
	return -1
}

type countingConn struct {
	net.Conn
	l *countingListener
	n *int
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	*c.n++
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// TestAnswerLeavesInOneWrite: a non-streamed answer that fits net/http's 4 KiB connection buffer (with its
// headers) leaves in one write on the client's socket, headers and body together, on both sides of net/http's
// 2 KiB chunking threshold (the larger ones come chunked from the fake upstream, in pieces); one of up to 64 KiB
// in two (net/http's buffer, then the rest). A flush where nothing streams would send the headers on their own,
// and an answer passed on as it arrives would leave in a write per piece.
func TestAnswerLeavesInOneWrite(t *testing.T) {
	small := upstream.New(upstream.Options{})
	t.Cleanup(small.Close)
	// 7500 deltas of "tok ": an answer of about 30 KiB, an embeddings answer's size.
	large := upstream.New(upstream.Options{StreamDeltas: 7500})
	t.Cleanup(large.Close)
	var ln *countingListener
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT",
		groups: []gatewaytest.Group{{ID: "root", Models: models(slug, "small", "large")}},
		// 700 deltas of "tok ": an answer of about 3 KiB.
		upstream: upstream.Options{StreamDeltas: 700},
		endpoints: []snapshot.Endpoint{
			{ID: "small", Slug: "small", Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: small.BaseURL()}}},
			{ID: "large", Slug: "large", Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: large.BaseURL()}}},
		},
		listener: func(l net.Listener) net.Listener {
			ln = &countingListener{Listener: l, writes: map[string]*int{}}
			return ln
		},
	})
	for _, tc := range []struct {
		model            string
		minSize, maxSize int
		writes           int
	}{{"small", 100, 2 << 10, 1}, {slug, 2 << 10, 4 << 10, 1}, {"large", 16 << 10, 64 << 10, 2}} {
		t.Run(tc.model, func(t *testing.T) {
			var client string
			c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err == nil {
					client = conn.LocalAddr().String()
				}
				return conn, err
			}}}
			defer c.CloseIdleConnections()
			body := []byte(`{"model":"` + tc.model + `","messages":[{"role":"user","content":"hello world"}]}`)
			req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Api-Key "+f.keys["root"])
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, %v: %s", resp.StatusCode, err, out)
			}
			if len(out) < tc.minSize || len(out) > tc.maxSize {
				t.Fatalf("answer of %d bytes, want %d to %d for this case", len(out), tc.minSize, tc.maxSize)
			}
			if n := ln.count(client); n != tc.writes {
				t.Errorf("the answer of %d bytes left in %d writes, want %d", len(out), n, tc.writes)
			}
		})
	}
}
