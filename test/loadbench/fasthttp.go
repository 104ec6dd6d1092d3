package loadbench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// The server evaluation (docs/decisions.md "gatewayd's HTTP server and garbage collector"): the per-call phase
// also counts gatewayd in its own process with its customer side served by fasthttp, through fasthttp's
// adapter of a net/http handler, beside gatewayd on net/http and nginx. It is the alternative issue 33 names;
// the harness measures it, gatewayd does not ship it.

// serverFastHTTP is childServer's value for the fasthttp evaluation.
const serverFastHTTP = "fasthttp"

// ownProcessFastHTTP names the target of gatewayd in its own process served by fasthttp.
const ownProcessFastHTTP = "gatewayd (own process, fasthttp)"

// fastHTTPTarget is ownProcessTarget for the child c that serves its customer side with fasthttp.
func fastHTTPTarget(c *child, ws *loadWorkspace) *Target {
	t := ownProcessTarget(c, ws)
	t.Name = ownProcessFastHTTP
	return t
}

// serveFastHTTP serves h with fasthttp on a loopback port until ctx ends and returns its base URL. The server is
// set as close to gatewayd's net/http server as fasthttp allows: the body streamed to the handler rather than
// read before it (so credentials are still checked first), 10 s for a request to arrive, 2 min idle.
func serveFastHTTP(ctx context.Context, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("failed to listen: %w", err)
	}
	srv := &fasthttp.Server{
		Handler:               fasthttpadaptor.NewFastHTTPHandler(h),
		StreamRequestBody:     true,
		ReadTimeout:           10 * time.Second,
		IdleTimeout:           2 * time.Minute,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
	}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown()
	}()
	return "http://" + ln.Addr().String(), nil
}
