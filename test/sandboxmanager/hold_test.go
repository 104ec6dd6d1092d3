package sandboxmanager

import (
	"bytes"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeHold holds the requests a test selects: while a hold is on, a request it matches is read and then waits
// until its client goes away, so a manager killed meanwhile loses it and nothing of it reaches the server behind.
type writeHold struct {
	mu      sync.Mutex
	match   func(*http.Request) bool
	arrived chan struct{} // closed when the first held request of the current hold arrives
}

// hold holds the requests match selects until release; the channel is closed when the first one arrives.
func (h *writeHold) hold(match func(*http.Request) bool) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.match, h.arrived = match, make(chan struct{})
	return h.arrived
}

// release lets every later request through; a request already held stays held until its client goes away.
func (h *writeHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.match = nil
}

// serve holds r and reports true when the current hold selects it; otherwise it reports false at once.
func (h *writeHold) serve(w http.ResponseWriter, r *http.Request) bool {
	h.mu.Lock()
	held := h.match != nil && h.match(r)
	if held {
		select {
		case <-h.arrived:
		default:
			close(h.arrived)
		}
	}
	h.mu.Unlock()
	if !held {
		return false
	}
	// Reading the body lets the server notice when the client goes away.
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-time.After(2 * time.Minute):
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	return true
}

// holdingRegistry is an OCI registry (go-containerregistry's) whose writes a test can hold.
type holdingRegistry struct {
	writeHold
	host  string
	close func()
}

func newHoldingRegistry() *holdingRegistry {
	h := &holdingRegistry{}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.serve(w, r) {
			inner.ServeHTTP(w, r)
		}
	}))
	h.close = srv.Close
	h.host = strings.TrimPrefix(srv.URL, "http://")
	return h
}

// manifestByDigest selects the write of an image's manifest by digest into repo: the push of a built image.
func manifestByDigest(repo name.Repository) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v2/"+repo.RepositoryStr()+"/manifests/sha256:")
	}
}

// tagWrite selects the write of tag into repo.
func tagWrite(repo name.Repository, tag string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Path == "/v2/"+repo.RepositoryStr()+"/manifests/"+tag
	}
}

// apiProxy is a TLS reverse proxy to the envtest API server, as its admin user, whose requests a test can hold:
// the manager processes reach the API server through it, so a test can kill one between two of its writes.
type apiProxy struct {
	writeHold
	srv *httptest.Server
}

func newAPIProxy(cfg *rest.Config) (*apiProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	// FlushInterval -1 streams watches as they come.
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }, Transport: transport, FlushInterval: -1,
		ErrorLog: log.New(io.Discard, "", 0)}
	p := &apiProxy{}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.serve(w, r) {
			rp.ServeHTTP(w, r)
		}
	}))
	return p, nil
}

// kubeconfig is a kubeconfig that reaches the API server through the proxy.
func (p *apiProxy) kubeconfig() ([]byte, error) {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	return clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"envtest": {Server: p.srv.URL, CertificateAuthorityData: ca}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"proxy": {}},
		Contexts:       map[string]*clientcmdapi.Context{"envtest": {Cluster: "envtest", AuthInfo: "proxy"}},
		CurrentContext: "envtest",
	})
}

// buildStatusWrite selects the status write that records status on build. It reads the body to decide and
// leaves it for the proxy.
func buildStatusWrite(build, status string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/sandboximagebuilds/"+build+"/status") {
			return false
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		return bytes.Contains(body, []byte(`"status":"`+status+`"`))
	}
}
