package autoscale

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/modelgate/modelgate/api/stats"
)

// serve answers handler on a real loopback socket until the test ends.
func serve(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestDemandOf: the demand of every replica that answers is summed (the peak, when above in-flight), and a
// replica that fails, hangs or answers garbage makes the counts incomplete.
func TestDemandOf(t *testing.T) {
	body := func(s string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != stats.Path {
				http.NotFound(w, r)
				return
			}
			_, _ = io.WriteString(w, s)
		}
	}
	// The manager's own client (no redirects followed), with a shorter timeout so the hang costs less.
	a := &Autoscaler{}
	a.defaults()
	a.HTTP.Timeout = 200 * time.Millisecond
	good1 := serve(t, body(`{"window_seconds":2,"deployments":[{"namespace":"ws","deployment_id":"d","in_flight":7,"peak":9},{"namespace":"ws","deployment_id":"e","in_flight":1,"peak":1}]}`))
	good2 := serve(t, body(`{"window_seconds":2,"deployments":[{"namespace":"ws","deployment_id":"d","in_flight":5,"peak":5}]}`))
	ctx := context.Background()
	demand, complete := a.demandOf(ctx, []string{good1, good2})
	if !complete || demand[types.NamespacedName{Namespace: "ws", Name: "d"}] != 14 || demand[types.NamespacedName{Namespace: "ws", Name: "e"}] != 1 {
		t.Fatalf("two answering replicas: demand %v, complete %v; want d 14, e 1, complete", demand, complete)
	}
	release := make(chan struct{})
	defer close(release)
	for name, bad := range map[string]string{
		"500":     serve(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }),
		"garbage": serve(t, body(`{"deployments":`)),
		"hangs": serve(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}),
		"redirect": serve(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://"+good1+stats.Path, http.StatusFound)
		}),
	} {
		demand, complete := a.demandOf(ctx, []string{good1, bad})
		if complete || demand[types.NamespacedName{Namespace: "ws", Name: "d"}] != 9 {
			t.Errorf("%s: demand %v, complete %v; want d 9 from the good replica, incomplete", name, demand, complete)
		}
	}
	if !strings.HasPrefix(stats.Path, "/internal/") {
		t.Fatalf("stats.Path %q must stay off the public routes", stats.Path)
	}
}
