package autoscale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/modelgate/modelgate/api/stats"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// DefaultInterval is how often the autoscaler reads every gatewayd replica.
const DefaultInterval = 2 * time.Second

// Autoscaler reads gatewayd's stats and records a replica decision on every ModelDeployment it can scale. It is
// a leader-elected runnable of the manager: only one replica decides.
type Autoscaler struct {
	// Client reads ModelDeployments and Models (the manager's cache) and patches the decision annotations.
	Client client.Client
	// Reader lists the EndpointSlices of StatsService. The manager's API reader: the Service lives in the
	// release namespace, which the cache may not watch; one list per round.
	Reader client.Reader
	// StatsService is gatewayd's metrics Service; its ready endpoints on port stats.PortName are the replicas.
	StatsService types.NamespacedName
	// HTTP reads each replica's stats; a 1 s timeout client when nil.
	HTTP *http.Client
	// Clock times the rounds and the scale-down delay; the real clock when nil.
	Clock clock.WithTicker
	// Interval between rounds; DefaultInterval when zero.
	Interval time.Duration
	// Recorder, when set, records an Event on a ModelDeployment for each change of its replicas.
	Recorder record.EventRecorder
	// Rounds, when set, is sent the outcome (nil or the error) of each round Start runs, once the round is over;
	// Start waits for the send. A test that drives Clock learns from it that the round a step started has run,
	// instead of guessing with a sleep. Production leaves it nil.
	Rounds chan<- error

	once sync.Once
	mu   sync.Mutex
	// windows hold, per deployment, the replicas demand asked for over its scale-down delay.
	windows map[types.NamespacedName]*Window
}

// NeedLeaderElection makes the autoscaler run on the leader only.
func (a *Autoscaler) NeedLeaderElection() bool { return true }

func (a *Autoscaler) defaults() { a.once.Do(a.setDefaults) }

func (a *Autoscaler) setDefaults() {
	if a.Clock == nil {
		a.Clock = clock.RealClock{}
	}
	if a.Interval <= 0 {
		a.Interval = DefaultInterval
	}
	if a.HTTP == nil {
		a.HTTP = &http.Client{Timeout: time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
}

// Start runs a round every Interval until ctx ends.
func (a *Autoscaler) Start(ctx context.Context) error {
	a.defaults()
	log := logf.FromContext(ctx).WithName("autoscaler")
	log.Info("Starting the autoscaler", "statsService", a.StatsService.String(), "interval", a.Interval.String())
	t := a.Clock.NewTicker(a.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			err := a.Poll(ctx)
			if err != nil {
				log.Error(err, "Autoscaler round failed")
			}
			if a.Rounds == nil {
				continue
			}
			select {
			case a.Rounds <- err:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// Poll runs one round: read every gatewayd replica, decide every scalable deployment, record what changed.
func (a *Autoscaler) Poll(ctx context.Context) error {
	a.defaults()
	a.mu.Lock()
	defer a.mu.Unlock()
	log := logf.FromContext(ctx).WithName("autoscaler")
	demand, complete, err := a.readDemand(ctx)
	if err != nil {
		return err
	}
	now := a.Clock.Now()
	var mds gatewayv1.ModelDeploymentList
	if err := a.Client.List(ctx, &mds); err != nil {
		return fmt.Errorf("failed to list ModelDeployments: %w", err)
	}
	models := map[types.NamespacedName]*gatewayv1.Model{}
	seen := map[types.NamespacedName]bool{}
	var errs []error
	for i := range mds.Items {
		md := &mds.Items[i]
		if !Scalable(md) {
			continue
		}
		key := client.ObjectKeyFromObject(md)
		seen[key] = true
		m, err := a.model(ctx, models, md)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		current, d := a.decide(md, m, now, demand[key], complete)
		if err := a.record(ctx, md, current, d, now); err != nil {
			errs = append(errs, err)
			continue
		}
		if d.Reason == "ScaleUp" || d.Reason == "ScaleDown" {
			log.Info("Scaling model deployment", "namespace", md.Namespace, "deployment", md.Name, "replicas", d.Replicas, "reason", d.Reason, "message", d.Message)
		}
	}
	if a.windows == nil {
		a.windows = map[types.NamespacedName]*Window{}
	}
	for key := range a.windows {
		if !seen[key] {
			delete(a.windows, key)
		}
	}
	return errors.Join(errs...)
}

// Scalable reports whether the autoscaler acts on md: an active container source, or a service source with a
// scaleTargetRef, that is not being deleted. A url source has nothing to scale.
func Scalable(md *gatewayv1.ModelDeployment) bool {
	src := md.Spec.Source
	return md.DeletionTimestamp.IsZero() && md.Spec.IsActive() &&
		(src.Container != nil || (src.Service != nil && src.Service.ScaleTargetRef != nil))
}

func (a *Autoscaler) model(ctx context.Context, cache map[types.NamespacedName]*gatewayv1.Model, md *gatewayv1.ModelDeployment) (*gatewayv1.Model, error) {
	key := types.NamespacedName{Namespace: md.Namespace, Name: md.Spec.ModelID}
	if m, ok := cache[key]; ok {
		return m, nil
	}
	m := &gatewayv1.Model{}
	if err := a.Client.Get(ctx, key, m); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("failed to read Model %s: %w", key, err)
		}
		m = nil
	}
	cache[key] = m
	return m, nil
}

// decide gathers the Input of one deployment from its object, the demand read and its window.
func (a *Autoscaler) decide(md *gatewayv1.ModelDeployment, m *gatewayv1.Model, now time.Time, demand int64, complete bool) (current int32, _ Decision) {
	b := EffectiveBounds(md, m)
	current = Replicas(md, b)
	if a.windows == nil {
		a.windows = map[types.NamespacedName]*Window{}
	}
	key := client.ObjectKeyFromObject(md)
	w, ok := a.windows[key]
	if !ok {
		// A deployment seen for the first time (a new one, or every one after the manager starts) keeps what it
		// runs for a whole delay: the calls before this manager started are unknown.
		w = &Window{}
		w.Add(now, current)
		a.windows[key] = w
	}
	want := b.Need(demand)
	held := w.Max(now, b.ScaleDownDelay)
	w.Add(now, want)
	wake := AnnotationTime(md, gatewayv1.AnnotationWakeRequestedAt)
	if !wake.IsZero() && now.Sub(wake) < b.ScaleDownDelay {
		held = max(held, 1)
	}
	started := latest(AnnotationTime(md, AnnotationScaledUpAt), wake)
	if s := md.Status.DeployingSince; s != nil {
		started = latest(started, s.Time)
	}
	scaledDown, _ := ScaleState(md)
	// gatewayd's peak spans two of its windows (one read interval each), read up to an interval late.
	fresh := now.Sub(AnnotationTime(md, gatewayv1.AnnotationScaledDownAt)) >= 3*a.Interval
	return current, Decide(Input{Now: now, Bounds: b, Current: current, ScaledDown: scaledDown, DemandFresh: fresh,
		Demand: demand, Held: held, Complete: complete,
		EverReady: md.Status.ReadySince != nil, StartedAt: started,
		StartupTimeout: time.Duration(md.Spec.StartupTimeoutSeconds) * time.Second})
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// record writes a decision that changes what md runs, as one merge patch of its annotations: the replicas; the
// time of a scale-up; scaled-down-at for zero; wake-requested-at when demand brings a deployment back from zero.
func (a *Autoscaler) record(ctx context.Context, md *gatewayv1.ModelDeployment, current int32, d Decision, now time.Time) error {
	if d.Replicas == current {
		return nil
	}
	scaledDown, _ := ScaleState(md)
	ts := now.UTC().Format(time.RFC3339Nano)
	ann := map[string]any{AnnotationReplicas: strconv.Itoa(int(d.Replicas))}
	switch {
	case d.Replicas == 0:
		ann[gatewayv1.AnnotationScaledDownAt] = ts
	case d.Replicas > current:
		ann[AnnotationScaledUpAt] = ts
		if scaledDown {
			ann[gatewayv1.AnnotationWakeRequestedAt] = ts
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	if err := a.Client.Patch(ctx, md, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("failed to record the autoscaler's decision on ModelDeployment %s/%s: %w", md.Namespace, md.Name, err)
	}
	if a.Recorder != nil {
		a.Recorder.Eventf(md, corev1.EventTypeNormal, d.Reason, "%d → %d replica(s): %s", current, d.Replicas, d.Message)
	}
	return nil
}

// readDemand reads every ready gatewayd replica behind StatsService and sums the demand per deployment.
// complete is false when a replica did not answer. It fails when there is no replica to read: without gatewayd
// there is no demand to measure, and a misnamed Service must not scale everything to zero.
func (a *Autoscaler) readDemand(ctx context.Context) (map[types.NamespacedName]int64, bool, error) {
	var slices discoveryv1.EndpointSliceList
	if err := a.Reader.List(ctx, &slices, client.InNamespace(a.StatsService.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: a.StatsService.Name}); err != nil {
		return nil, false, fmt.Errorf("failed to list the EndpointSlices of gatewayd's Service %s: %w", a.StatsService, err)
	}
	addrs := stats.Replicas(slices.Items)
	if len(addrs) == 0 {
		return nil, false, fmt.Errorf("no ready endpoint on port %q of gatewayd's Service %s", stats.PortName, a.StatsService)
	}
	demand, complete := a.demandOf(ctx, addrs)
	return demand, complete, nil
}

// demandOf reads the stats of every address at once and sums the demand per deployment; complete is false when
// one did not answer.
func (a *Autoscaler) demandOf(ctx context.Context, addrs []string) (map[types.NamespacedName]int64, bool) {
	type answer struct {
		s   stats.Stats
		err error
	}
	answers := make([]answer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			answers[i].s, answers[i].err = a.read(ctx, addr)
		})
	}
	wg.Wait()
	demand := map[types.NamespacedName]int64{}
	complete := true
	for i, ans := range answers {
		if ans.err != nil {
			complete = false
			logf.FromContext(ctx).WithName("autoscaler").Info("A gatewayd replica did not report its calls", "addr", addrs[i], "error", ans.err.Error())
			continue
		}
		for _, d := range ans.s.Deployments {
			demand[types.NamespacedName{Namespace: d.Namespace, Name: d.DeploymentID}] += d.Demand()
		}
	}
	return demand, complete
}

// read GETs one replica's stats.
func (a *Autoscaler) read(ctx context.Context, addr string) (stats.Stats, error) {
	var s stats.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+stats.Path, nil)
	if err != nil {
		return s, err
	}
	resp, err := a.HTTP.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s answered %d", stats.Path, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&s); err != nil {
		return s, fmt.Errorf("failed to decode the stats of %s: %w", addr, err)
	}
	return s, nil
}
