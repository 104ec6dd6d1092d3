package loadbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
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

// startFloors starts every floor in front of u, each as a peer whose stop stops its process; on an error it stops
// the ones it started.
func startFloors(ctx context.Context, u *upstreams) ([]*peer, error) {
	var started []*peer
	for _, server := range floors {
		c, err := startFloor(ctx, server, u)
		if err != nil {
			for _, p := range started {
				p.stop()
			}
			return nil, fmt.Errorf("%s: %w", floorName(server), err)
		}
		plain, stream := floorTargets(c, server)
		started = append(started, &peer{name: floorName(server), plain: plain, stream: stream, stop: c.stop, pid: c.pid})
	}
	return started, nil
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

// readFloorBody reads r's body into a pooled buffer, which the caller puts back in floorBuffers; nil, with a 400
// answered, when the body could not be read.
func readFloorBody(w http.ResponseWriter, r *http.Request) *bytes.Buffer {
	in := floorBuffers.Get().(*bytes.Buffer)
	in.Reset()
	if _, err := in.ReadFrom(http.MaxBytesReader(w, r.Body, floorBodyCap)); err != nil {
		floorBuffers.Put(in)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil
	}
	return in
}

// relayFlushed copies src to dst, flushing after each read, until either side fails or src ends.
func relayFlushed(dst io.Writer, flush func() error, src io.Reader) {
	buf := make([]byte, 4<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil || flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// fastClients are fasthttp's clients to the plain and the paced upstream; the paced one streams answers.
type fastClients struct{ plain, paced *fasthttp.HostClient }

func newFastClients(plain, paced string) fastClients {
	return fastClients{plain: &fasthttp.HostClient{Addr: plain, MaxConns: upstream.IdleConnsPerHost},
		paced: &fasthttp.HostClient{Addr: paced, MaxConns: upstream.IdleConnsPerHost, StreamResponseBody: true}}
}

// do sends body to path of the upstream that path's prefix names, and returns the answer, which the caller
// releases (fasthttp.ReleaseResponse; a streamed one after its body).
func (f fastClients) do(path, body []byte) (*fasthttp.Response, error) {
	c := f.plain
	if p, ok := bytes.CutPrefix(path, []byte(pacedPrefix)); ok {
		c, path = f.paced, p
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURIBytes(path)
	req.Header.SetHost(c.Addr)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
	resp := fasthttp.AcquireResponse()
	if err := c.Do(req, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, err
	}
	return resp, nil
}

// netHTTPFloor proxies to the plain or paced upstream through gatewayd's transport: the body read first, a
// non-streamed answer read whole and written once with its length, a streamed one flushed as each read ends.
func netHTTPFloor(plain, paced string) http.Handler {
	t := upstream.NewTransport()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, path := plain, r.URL.Path
		if p, ok := strings.CutPrefix(path, pacedPrefix); ok {
			host, path = paced, p
		}
		in := readFloorBody(w, r)
		if in == nil {
			return
		}
		defer floorBuffers.Put(in)
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
		ct := resp.Header.Get("Content-Type")
		w.Header().Set("Content-Type", ct)
		if strings.HasPrefix(ct, "text/event-stream") {
			w.WriteHeader(resp.StatusCode)
			rc := http.NewResponseController(w)
			_ = rc.Flush()
			relayFlushed(w, rc.Flush, resp.Body)
			return
		}
		out := floorBuffers.Get().(*bytes.Buffer)
		defer floorBuffers.Put(out)
		out.Reset()
		if _, err := out.ReadFrom(resp.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out.Bytes())
	})
}

// fastHTTPFloor proxies to the plain or paced upstream with fasthttp's client: a non-streamed answer read whole
// and set as the body, a streamed one written and flushed as each read ends.
func fastHTTPFloor(plain, paced string) fasthttp.RequestHandler {
	clients := newFastClients(plain, paced)
	return func(ctx *fasthttp.RequestCtx) {
		resp, err := clients.do(ctx.Path(), ctx.PostBody())
		if err != nil {
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
			defer func() { _ = resp.CloseBodyStream() }()
			relayFlushed(w, w.Flush, body)
		})
	}
}

// netHTTPFastClientFloor is netHTTPFloor with fasthttp's client to the upstream in place of gatewayd's transport.
func netHTTPFastClientFloor(plain, paced string) http.Handler {
	clients := newFastClients(plain, paced)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := readFloorBody(w, r)
		if in == nil {
			return
		}
		defer floorBuffers.Put(in)
		resp, err := clients.do([]byte(r.URL.Path), in.Bytes())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer fasthttp.ReleaseResponse(resp)
		w.Header().Set("Content-Type", string(resp.Header.ContentType()))
		body := resp.BodyStream()
		if body == nil {
			w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body())))
			w.WriteHeader(resp.StatusCode())
			_, _ = w.Write(resp.Body())
			return
		}
		defer func() { _ = resp.CloseBodyStream() }()
		w.WriteHeader(resp.StatusCode())
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		relayFlushed(w, rc.Flush, body)
	})
}
