package loadbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// The floor (docs/benchmarks.md "The floor of a Go proxy"): how close to nginx a Go proxy in its own process gets
// on this machine when it does nothing but proxy. Each floor is a separate process, as nginx and gatewayd in its
// own process are, that reads the request's body, sends it to the fake upstream and passes the answer back, with
// no credential, no limit, no usage read, no billing and no metrics:
//
//   - floorNetHTTP: net/http's server, and gatewayd's own transport to the upstream (upstream.NewTransport);
//   - floorFastHTTP: fasthttp's server with a handler written for it (no net/http adapter), and fasthttp's
//     client to the upstream;
//   - floorNetHTTPFastClient: net/http's server, and fasthttp's client to the upstream: which of the two sides
//     the difference between the first two is on.
//
// What a floor costs a call is what any gatewayd on that server and client costs before its first line of policy;
// the harness measures it, gatewayd does not ship it.

// Values of childServer for the floors; the child then runs no gatewayd.
const (
	floorNetHTTP  = "floor-nethttp"
	floorFastHTTP = "floor-fasthttp"
	// floorNetHTTPFastClient is net/http's server with fasthttp's client.
	floorNetHTTPFastClient = "floor-nethttp-fastclient"
)

// floors are the floor proxies, in the order the harness drives them.
var floors = []string{floorNetHTTP, floorNetHTTPFastClient, floorFastHTTP}

// childUpstreams passes a floor child the plain and the paced upstream's host:port, comma-separated.
const childUpstreams = "LOADBENCH_CHILD_UPSTREAMS"

// floorName is the report's name of the floor served by server.
func floorName(server string) string {
	switch server {
	case floorFastHTTP:
		return "floor: fasthttp proxy (own process)"
	case floorNetHTTPFastClient:
		return "floor: net/http server, fasthttp client (own process)"
	}
	return "floor: net/http proxy (own process)"
}

// pacedPrefix routes a floor's call to the paced upstream; without it a call goes to the plain one.
const pacedPrefix = "/paced"

// startFloor starts a floor proxy of server in its own process, in front of u.
func startFloor(ctx context.Context, server string, u *upstreams) (*child, error) {
	return spawnChild(ctx, childEnviron(childEnv+"=floor", childServer+"="+server,
		childUpstreams+"="+hostPort(u.plain.URL)+","+hostPort(u.paced.URL)))
}

// floorTargets are the plain and the streamed target of the floor child c.
func floorTargets(c *child, server string) (plain, stream *Target) {
	name := floorName(server)
	return &Target{Name: name, URL: c.base + "/v1/chat/completions", Auth: "Bearer floor", Model: "echo", StreamModel: "echo"},
		&Target{Name: name, URL: c.base + pacedPrefix + "/v1/chat/completions", Auth: "Bearer floor", Model: "echo", StreamModel: "echo"}
}

// runFloor serves the floor named by childServer until SIGTERM.
func runFloor(ctx context.Context) error {
	plain, paced, ok := strings.Cut(os.Getenv(childUpstreams), ",")
	if !ok {
		return fmt.Errorf("%s must be plain,paced host:port", childUpstreams)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("failed to listen: %w", err)
	}
	var h http.Handler
	switch s := os.Getenv(childServer); s {
	case floorNetHTTP:
		h = netHTTPFloor(plain, paced)
	case floorNetHTTPFastClient:
		h = netHTTPFastClientFloor(plain, paced)
	case floorFastHTTP:
		srv := &fasthttp.Server{Handler: fastHTTPFloor(plain, paced), ReadTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			NoDefaultServerHeader: true, NoDefaultContentType: true}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Shutdown() }()
	default:
		return fmt.Errorf("%s=%q names no floor", childServer, s)
	}
	if h != nil {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	fmt.Println(childReadyPrefix + "http://" + ln.Addr().String())
	<-ctx.Done()
	return nil
}

// floorBodyCap bounds a floor's request body, as gatewayd's own cap does.
const floorBodyCap = 1 << 20

var floorBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// netHTTPFloor proxies to the plain or paced upstream through gatewayd's transport: the body read first, a
// non-streamed answer read whole and written once with its length, a streamed one flushed as each read ends.
func netHTTPFloor(plain, paced string) http.Handler {
	t := upstream.NewTransport()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, path := plain, r.URL.Path
		if p, ok := strings.CutPrefix(path, pacedPrefix); ok {
			host, path = paced, p
		}
		in := floorBuffers.Get().(*bytes.Buffer)
		defer floorBuffers.Put(in)
		in.Reset()
		if _, err := in.ReadFrom(http.MaxBytesReader(w, r.Body, floorBodyCap)); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://"+host+path, bytes.NewReader(in.Bytes()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := t.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			w.WriteHeader(resp.StatusCode)
			rc := http.NewResponseController(w)
			_ = rc.Flush()
			buf := make([]byte, 4<<10)
			for {
				n, err := resp.Body.Read(buf)
				if n > 0 {
					if _, werr := w.Write(buf[:n]); werr != nil {
						return
					}
					_ = rc.Flush()
				}
				if err != nil {
					return
				}
			}
		}
		out := floorBuffers.Get().(*bytes.Buffer)
		defer floorBuffers.Put(out)
		out.Reset()
		if _, err := out.ReadFrom(resp.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(out.Len()))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out.Bytes())
	})
}

// fastHTTPFloor proxies to the plain or paced upstream with fasthttp's client: a non-streamed answer read whole
// and set as the body, a streamed one written and flushed as each read ends.
func fastHTTPFloor(plain, paced string) fasthttp.RequestHandler {
	plainClient := &fasthttp.HostClient{Addr: plain, MaxConns: upstream.IdleConnsPerHost}
	pacedClient := &fasthttp.HostClient{Addr: paced, MaxConns: upstream.IdleConnsPerHost, StreamResponseBody: true}
	return func(ctx *fasthttp.RequestCtx) {
		c, path := plainClient, ctx.Path()
		if p, ok := bytes.CutPrefix(path, []byte(pacedPrefix)); ok {
			c, path = pacedClient, p
		}
		req := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURIBytes(path)
		req.Header.SetHost(c.Addr)
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(ctx.PostBody())
		resp := fasthttp.AcquireResponse()
		if err := c.Do(req, resp); err != nil {
			fasthttp.ReleaseResponse(resp)
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
			return
		}
		ctx.SetStatusCode(resp.StatusCode())
		ctx.Response.Header.SetContentTypeBytes(resp.Header.ContentType())
		body := resp.BodyStream()
		if body == nil {
			ctx.SetBody(resp.Body())
			fasthttp.ReleaseResponse(resp)
			return
		}
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer fasthttp.ReleaseResponse(resp)
			buf := make([]byte, 4<<10)
			for {
				n, err := body.Read(buf)
				if n > 0 {
					if _, werr := w.Write(buf[:n]); werr != nil {
						return
					}
					if w.Flush() != nil {
						return
					}
				}
				if err != nil {
					if !errors.Is(err, io.EOF) {
						return
					}
					_ = resp.CloseBodyStream()
					return
				}
			}
		})
	}
}

// netHTTPFastClientFloor is netHTTPFloor with fasthttp's client to the upstream in place of gatewayd's transport.
func netHTTPFastClientFloor(plain, paced string) http.Handler {
	plainClient := &fasthttp.HostClient{Addr: plain, MaxConns: upstream.IdleConnsPerHost}
	pacedClient := &fasthttp.HostClient{Addr: paced, MaxConns: upstream.IdleConnsPerHost, StreamResponseBody: true}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, path := plainClient, r.URL.Path
		if p, ok := strings.CutPrefix(path, pacedPrefix); ok {
			c, path = pacedClient, p
		}
		in := floorBuffers.Get().(*bytes.Buffer)
		defer floorBuffers.Put(in)
		in.Reset()
		if _, err := in.ReadFrom(http.MaxBytesReader(w, r.Body, floorBodyCap)); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI(path)
		req.Header.SetHost(c.Addr)
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(in.Bytes())
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		if err := c.Do(req, resp); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", string(resp.Header.ContentType()))
		body := resp.BodyStream()
		if body == nil {
			w.Header().Set("Content-Length", fmt.Sprint(len(resp.Body())))
			w.WriteHeader(resp.StatusCode())
			_, _ = w.Write(resp.Body())
			return
		}
		defer func() { _ = resp.CloseBodyStream() }()
		w.WriteHeader(resp.StatusCode())
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		buf := make([]byte, 4<<10)
		for {
			n, err := body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				_ = rc.Flush()
			}
			if err != nil {
				return
			}
		}
	})
}
