package requestlog

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// Path is the route, on gatewayd's metrics listener (never on the address customers reach), that answers one
// deployment's lines of this replica's request log as an Answer to GET ?namespace=..&deployment=.., so that the
// replica serving a logs call can show the calls every replica made.
const Path = "/internal/requestlog"

// Answer is one replica's lines of one deployment.
type Answer struct {
	// Replica names the replica in the lines (its host name); Instance tells one Log from another.
	Replica  string  `json:"replica"`
	Instance string  `json:"instance"`
	Entries  []Entry `json:"entries"`
}

// ServeHTTP answers Path.
func (l *Log) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q, ok := httperr.RequiredQuery(w, r, "namespace and deployment are required query parameters.", "namespace", "deployment")
	if !ok {
		return
	}
	httperr.WriteJSON(w, http.StatusOK, l.answer(q[0], q[1]))
}

// answer is this replica's lines of one deployment.
func (l *Log) answer(namespace, deployment string) Answer {
	return Answer{Replica: l.replica, Instance: l.instance, Entries: l.Entries(namespace, deployment)}
}

// Cluster reads the request logs of every gatewayd replica: this one's from memory, every other's over HTTP at
// Path of the addresses Peers lists.
type Cluster struct {
	Local *Log
	// Peers lists the metrics listeners (host:port) of every replica, this one's included; only Local is read
	// when nil.
	Peers func(ctx context.Context) ([]string, error)
	// HTTP reads the peers; peerClient when nil.
	HTTP *http.Client
}

// peerClient reads a replica's log within 2 s and follows no redirect.
var peerClient = &http.Client{Timeout: 2 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// Read returns one deployment's lines of every replica that answered, this one's first, and an error for each
// that did not (or for the list of peers), so that a logs answer can say what it left out.
func (c *Cluster) Read(ctx context.Context, namespace, deployment string) ([]Answer, []error) {
	own := c.Local.answer(namespace, deployment)
	if c.Peers == nil {
		return []Answer{own}, nil
	}
	addrs, err := c.Peers(ctx)
	if err != nil {
		return []Answer{own}, []error{fmt.Errorf("failed to list the gatewayd replicas: %w", err)}
	}
	answers := make([]Answer, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { answers[i], errs[i] = c.read(ctx, addr, namespace, deployment) })
	}
	wg.Wait()
	out, failed := []Answer{own}, []error(nil)
	for i, a := range answers {
		switch {
		case errs[i] != nil:
			failed = append(failed, errs[i])
		case a.Instance != own.Instance:
			out = append(out, a)
		}
	}
	return out, failed
}

func (c *Cluster) read(ctx context.Context, addr, namespace, deployment string) (Answer, error) {
	hc := c.HTTP
	if hc == nil {
		hc = peerClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+Path, nil)
	if err != nil {
		return Answer{}, err
	}
	q := req.URL.Query()
	q.Set("namespace", namespace)
	q.Set("deployment", deployment)
	req.URL.RawQuery = q.Encode()
	resp, err := hc.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("gatewayd replica %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Answer{}, fmt.Errorf("gatewayd replica %s answered %d", addr, resp.StatusCode)
	}
	var a Answer
	// A replica holds at most DefaultPerDeployment lines of a deployment; bound what one may send all the same.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&a); err != nil {
		return Answer{}, fmt.Errorf("gatewayd replica %s: %w", addr, err)
	}
	return a, nil
}
