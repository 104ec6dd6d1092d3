package loadbench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/stack"
	"github.com/modelgate/modelgate/test/testutil"
)

const (
	probeGroup    = "loadbench-probe"
	probeKeyName  = "loadbench-probe-key"
	lowThreshold  = 1
	highThreshold = 1_000_000_000
	changeTimeout = 30 * time.Second
	settleTimeout = 10 * time.Minute
	createWorkers = 32
)

type propagationResult struct {
	Groups    int
	Latencies []time.Duration
	TimedOut  int
	Notes     []string
	// stages splits each change: admission and write, to publish, to served, to enforced.
	stages [4][]time.Duration
}

// measurePropagation fills the stack's workspace with cfg.Groups background groups, then times cfg.Changes limit
// changes of one probe group: each is a PATCH of the Group through the API server (admission webhook, manager,
// snapshot ConfigMaps, gatewayd's watch), timed until a request through gatewayd sees it enforced. Changes
// alternate a REQUEST per MINUTE threshold between 1, which the probe's own earlier calls already exhaust (so
// enforcement is a 429), and a billion (so enforcement is a 200 again).
func measurePropagation(ctx context.Context, cfg Config, st *stack.Stack) (propagationResult, error) {
	c, ns := st.Client, st.Namespace
	probe := &prober{url: st.GatewayURL + "/v1/chat/completions", client: &http.Client{Timeout: 10 * time.Second}}
	if err := createProbe(ctx, c, ns, probe); err != nil {
		return propagationResult{}, err
	}
	if _, err := probe.until(ctx, http.StatusOK, 2*time.Minute, cfg.ProbeInterval); err != nil {
		return propagationResult{}, fmt.Errorf("the probe key never worked: %w", err)
	}

	res := propagationResult{Groups: cfg.Groups}
	start := time.Now()
	retried, err := createBackground(ctx, c, ns, cfg.Groups)
	if err != nil {
		return res, err
	}
	created := time.Since(start)
	cfg.progress("created %d background groups in %s; waiting for gatewayd to serve them", cfg.Groups, created.Round(time.Millisecond))
	if err := settle(ctx, st, cfg.Groups+1); err != nil {
		return res, err
	}
	cfg.progress("gatewayd serves the workspace %s after the first create; timing %d changes", time.Since(start).Round(time.Millisecond), cfg.Changes)
	res.Notes = append(res.Notes, fmt.Sprintf("Propagation: %d background groups (3-level CASCADING trees) were created in %s "+
		"with %d concurrent creates through the validating webhook, and gatewayd served them and the manager was idle %s after the first create. "+
		"The %d timed changes of a root group's limit go through the webhook, the manager and gatewayd's watch, and "+
		"are timed from the PATCH until a probe request every %s through gatewayd sees the new limit.",
		cfg.Groups, created.Round(time.Second), createWorkers, time.Since(start).Round(time.Second), cfg.Changes, cfg.ProbeInterval))
	if retried > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("Propagation: background creates sent again after the validating webhook's 10 s ran out, "+
			"as a client of the API server would: %d.", retried))
	}

	for i := range cfg.Changes {
		threshold, want := int64(highThreshold), http.StatusOK
		if i%2 == 0 {
			threshold, want = lowThreshold, http.StatusTooManyRequests
			// One admitted call in the window, so a threshold of 1 is exhausted once enforced.
			_, _ = probe.call(ctx)
		}
		g := &gatewayv1.Group{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: probeGroup}, g); err != nil {
			return res, fmt.Errorf("failed to get the probe group: %w", err)
		}
		patch := client.MergeFrom(g.DeepCopy())
		g.Spec.Models[0].RateLimits[0].Threshold = threshold
		loaded := watchVersion(ctx, st)
		t0 := time.Now()
		if err := c.Patch(ctx, g, patch); err != nil {
			return res, fmt.Errorf("failed to patch the probe group (change %d): %w", i+1, err)
		}
		written := time.Now()
		at, err := probe.until(ctx, want, changeTimeout, cfg.ProbeInterval)
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			res.TimedOut++
			res.Latencies = append(res.Latencies, changeTimeout)
			continue
		}
		res.Latencies = append(res.Latencies, at.Sub(t0))
		if l := <-loaded; !l.at.IsZero() {
			// The manager numbers a snapshot with the Unix milliseconds of its decision to publish it.
			published := time.UnixMilli(l.version)
			res.stages[0] = append(res.stages[0], written.Sub(t0))
			res.stages[1] = append(res.stages[1], published.Sub(written))
			res.stages[2] = append(res.stages[2], l.at.Sub(published))
			res.stages[3] = append(res.stages[3], at.Sub(l.at))
		}
	}
	// The same PATCH with the webhook configuration removed shows what admission itself costs.
	var bare []time.Duration
	if err := withoutWebhooks(ctx, c, func() error {
		for i := range 5 {
			g := &gatewayv1.Group{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: probeGroup}, g); err != nil {
				return fmt.Errorf("failed to get the probe group: %w", err)
			}
			patch := client.MergeFrom(g.DeepCopy())
			g.Spec.Models[0].RateLimits[0].Threshold = highThreshold - int64(i%2)
			t0 := time.Now()
			if err := c.Patch(ctx, g, patch); err != nil {
				return fmt.Errorf("failed to patch the probe group: %w", err)
			}
			bare = append(bare, time.Since(t0))
		}
		return nil
	}); err != nil {
		return res, err
	}
	if len(res.stages[0]) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("Propagation stages, median over %d changes: PATCH through admission %s; "+
			"written to the manager's decision to publish %s; publish (ConfigMap writes, watch, decode, swap) to gatewayd serving it %s; "+
			"served to the next probe seeing it %s. The same PATCH without the validating webhook: %s (median of %d).", len(res.stages[0]),
			medianDuration(res.stages[0]), medianDuration(res.stages[1]), medianDuration(res.stages[2]), medianDuration(res.stages[3]),
			medianDuration(bare), len(bare)))
	}
	return res, nil
}

type loadedVersion struct {
	version int64
	at      time.Time
}

// watchVersion reports when gatewayd starts serving a newer snapshot of the workspace than the one it serves now
// (zero after changeTimeout).
func watchVersion(ctx context.Context, st *stack.Stack) <-chan loadedVersion {
	var from int64
	if n := st.Gateway.View().Namespace(st.Namespace); n != nil {
		from = n.Version
	}
	out := make(chan loadedVersion, 1)
	go func() {
		deadline := time.Now().Add(changeTimeout)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if n := st.Gateway.View().Namespace(st.Namespace); n != nil && n.Version > from {
				out <- loadedVersion{version: n.Version, at: time.Now()}
				return
			}
			time.Sleep(time.Millisecond)
		}
		out <- loadedVersion{}
	}()
	return out
}

func medianDuration(ds []time.Duration) time.Duration {
	return testutil.Percentile(slices.Clone(ds), .5).Round(time.Millisecond)
}

type prober struct {
	url, key string
	client   *http.Client
	// body is the request, probeBody when nil.
	body []byte
}

var probeBody = []byte(`{"model":"` + stack.EndpointSlug + `","messages":[{"role":"user","content":"probe"}]}`)

func (p *prober) call(ctx context.Context) (int, error) {
	body := p.body
	if body == nil {
		body = probeBody
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Api-Key "+p.key)
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// until probes until an answer has status want and returns when that answer arrived.
func (p *prober) until(ctx context.Context, want int, timeout, interval time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	last := 0
	for time.Now().Before(deadline) {
		code, err := p.call(ctx)
		if err == nil && code == want {
			return time.Now(), nil
		}
		if err != nil && ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		last = code
		time.Sleep(interval)
	}
	return time.Time{}, fmt.Errorf("no %d within %s (last status %d)", want, timeout, last)
}

// createProbe creates the probe group, a root with a high REQUEST per MINUTE limit on the stack's Endpoint, and
// a federated key of it (prefix and hash only, as the REST API stores one).
func createProbe(ctx context.Context, c client.Client, ns string, p *prober) error {
	g := &gatewayv1.Group{
		ObjectMeta: metav1.ObjectMeta{Name: probeGroup, Namespace: ns},
		Spec: gatewayv1.GroupSpec{
			ExternalEntityID: "ext-" + probeGroup,
			Models: []gatewayv1.ModelConfig{{Slug: stack.EndpointSlug,
				RateLimits: []gatewayv1.Limit{{Type: gatewayv1.LimitTypeRequest, Unit: gatewayv1.UnitMinute, Threshold: highThreshold}}}},
		},
	}
	if err := c.Create(ctx, g); err != nil {
		return fmt.Errorf("failed to create the probe group: %w", err)
	}
	key, err := stack.NewWorkspaceKey()
	if err != nil {
		return err
	}
	key = "mgk_" + key[4:] // same format, federated prefix
	sum := sha256.Sum256([]byte(key))
	k := &gatewayv1.APIKey{
		ObjectMeta: metav1.ObjectMeta{Name: probeKeyName, Namespace: ns},
		Spec: gatewayv1.APIKeySpec{GroupID: probeGroup,
			KeySource: gatewayv1.KeySource{Prefix: key[:16], Hash: hex.EncodeToString(sum[:])}},
	}
	if err := c.Create(ctx, k); err != nil {
		return fmt.Errorf("failed to create the probe key: %w", err)
	}
	p.key = key
	return nil
}

// withoutWebhooks runs f with the validating webhook configurations removed and puts them back afterwards.
func withoutWebhooks(ctx context.Context, c client.Client, f func() error) error {
	var list admissionv1.ValidatingWebhookConfigurationList
	if err := c.List(ctx, &list); err != nil {
		return fmt.Errorf("failed to list webhook configurations: %w", err)
	}
	for i := range list.Items {
		if err := c.Delete(ctx, &list.Items[i]); err != nil {
			return fmt.Errorf("failed to remove webhook configuration %s: %w", list.Items[i].Name, err)
		}
	}
	ferr := f()
	var errs []error
	for i := range list.Items {
		w := list.Items[i].DeepCopy()
		w.ObjectMeta = metav1.ObjectMeta{Name: w.Name, Labels: w.Labels, Annotations: w.Annotations}
		if err := c.Create(ctx, w); err != nil {
			errs = append(errs, fmt.Errorf("failed to restore webhook configuration %s: %w", w.Name, err))
		}
	}
	return errors.Join(append([]error{ferr}, errs...)...)
}

// createAttempts bounds the sends of one background create whose call to the validating webhook timed out.
const createAttempts = 3

// webhookTimedOut tells whether the API server refused a write because its call to an admission webhook failed
// (timed out): the write was not stored, and the same write may be sent again.
func webhookTimedOut(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed calling webhook")
}

// createBackground creates n groups in 3-level trees, one level after the other so parents exist first, with
// many concurrent creates, and returns how many creates it sent again after a webhook timeout. The background
// is the setting of the timed changes, not what they time: on this shared machine the webhook's 10 s has run
// out for one create in 10,000 under the bulk load, which failed the whole phase.
func createBackground(ctx context.Context, c client.Client, ns string, n int) (int64, error) {
	var retried atomic.Int64
	for depth := 1; depth <= 3; depth++ {
		var idx []int
		for i := range n {
			if _, _, d := treeSlot(i); d == depth {
				idx = append(idx, i)
			}
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		for range createWorkers {
			wg.Go(func() {
				for {
					k := int(next.Add(1)) - 1
					if k >= len(idx) || ctx.Err() != nil {
						return
					}
					name, parent, d := treeSlot(idx[k])
					// With the manager's finalizer already on, its catch-up is one status write per group, not two writes.
					g := &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: []string{gatewayv1.Finalizer}},
						Spec: groupSpec(name, parent, d)}
					g.Spec.Models[0].Slug = stack.EndpointSlug
					err := c.Create(ctx, g.DeepCopy())
					for attempt := 1; err != nil && webhookTimedOut(err) && attempt < createAttempts; attempt++ {
						retried.Add(1)
						if err = c.Create(ctx, g.DeepCopy()); apierrors.IsAlreadyExists(err) {
							err = nil
						}
					}
					if err != nil {
						mu.Lock()
						if first == nil {
							first = fmt.Errorf("failed to create group %s: %w", name, err)
						}
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if first != nil {
			return retried.Load(), first
		}
	}
	return retried.Load(), nil
}

// settle waits until gatewayd serves at least groups groups of the workspace, every controller of the manager
// has an empty queue and no reconcile running, and both held for a few seconds, so the manager's catch-up after
// the bulk create (finalizers, status, snapshot passes) does not bleed into the timed changes.
func settle(ctx context.Context, st *stack.Stack, groups int) error {
	const quiet = 3 * time.Second
	deadline := time.Now().Add(settleTimeout)
	since := time.Now()
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := st.Gateway.View().Namespace(st.Namespace)
		busy, err := managerBusy()
		if err != nil {
			return err
		}
		switch {
		case n == nil || len(n.Groups) < groups || busy > 0:
			since = time.Now()
		case time.Since(since) >= quiet:
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	n := st.Gateway.View().Namespace(st.Namespace)
	have := 0
	if n != nil {
		have = len(n.Groups)
	}
	busy, _ := managerBusy()
	return fmt.Errorf("after %s gatewayd served %d of %d groups and the manager had %v queued or running reconciles", settleTimeout, have, groups, busy)
}

// managerBusy is the number of queued plus running reconciles of every controller in this process, from
// controller-runtime's own metrics.
func managerBusy() (float64, error) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, fmt.Errorf("failed to read the manager's metrics: %w", err)
	}
	var busy float64
	for _, f := range families {
		if f.GetName() != "workqueue_depth" && f.GetName() != "controller_runtime_active_workers" {
			continue
		}
		for _, m := range f.GetMetric() {
			busy += m.GetGauge().GetValue()
		}
	}
	return busy, nil
}
