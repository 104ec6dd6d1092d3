package stack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/modelgate/modelgate/test/upstream"
)

// startUpstream starts the demo OpenAI-compatible upstream that the seeded Endpoint routes to.
func (s *Stack) startUpstream(addr string) error {
	baseURL, stop, err := StartUpstream(addr)
	if err != nil {
		return err
	}
	s.UpstreamURL, s.stopUpstream = baseURL, stop
	return nil
}

// StartUpstream serves the fake upstream of package upstream on addr and returns its OpenAI base URL (ending in
// /v1) and a function that stops it. The fake listens on a port of its own choosing, so a fixed address is served
// by a reverse proxy in front of it; an address with port 0 gets the fake directly.
func StartUpstream(addr string) (baseURL string, stop func(), err error) {
	fake := upstream.New(upstream.Options{})
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		fake.Close()
		return "", nil, fmt.Errorf("invalid demo upstream address %q: %w", addr, err)
	}
	if port == "0" && (host == "127.0.0.1" || host == "localhost") {
		return fake.BaseURL(), fake.Close, nil
	}

	target, err := url.Parse(fake.URL)
	if err != nil {
		fake.Close()
		return "", nil, fmt.Errorf("failed to parse the fake upstream's URL: %w", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // pass streamed chunks through as they come
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fake.Close()
		return "", nil, fmt.Errorf("failed to listen on %s for the demo upstream: %w", addr, err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }() // returns http.ErrServerClosed on stop
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		fake.Close()
	}
	return "http://" + l.Addr().String() + "/v1", stop, nil
}
