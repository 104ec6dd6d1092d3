package async

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
	"github.com/modelgate/modelgate/gatewayd/route"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// maxOutputBytes bounds a model answer kept for the webhook.
const maxOutputBytes = 16 << 20

// Backoff of a deployment that answered 429 or 503: doubling from the first to the last, or the model's
// Retry-After when it sends one.
const (
	pauseMin = time.Second
	pauseMax = 30 * time.Second
)

func (s *Service) dispatchLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.Poll)
	defer t.Stop()
	for {
		s.dispatchOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wakeCh:
		}
	}
}

// slots is how many requests of d may run at once: its ready replicas (maxReplica for a url source) times its
// concurrencyTarget, less the sync calls in flight, which go first.
func (s *Service) slots(namespace string, d *snapshot.Deployment) int {
	target, replicas := int(max(d.ConcurrencyTarget, 1)), 0
	switch d.Kind {
	case snapshot.DeploymentURL:
		if d.Ready {
			replicas = int(max(d.MaxReplica, 1))
		}
	case snapshot.DeploymentService:
		if s.opts.Addresses != nil {
			replicas = s.opts.Addresses.Ready(namespace, d.Service, d.PortName)
		}
	}
	n := replicas * target
	if s.opts.Calls != nil {
		n -= s.opts.Calls.SyncInFlight(namespace, d.ID)
	}
	return n
}

func (s *Service) isPaused(q string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Before(s.paused[q].until)
}

// backoff pauses queue q after a 429 or 503: for retryAfter when the model sent one, else doubling.
func (s *Service) backoff(q string, now time.Time, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.paused[q]
	p.wait = min(max(p.wait*2, pauseMin), pauseMax)
	wait := p.wait
	if retryAfter > 0 {
		wait = min(retryAfter, pauseMax)
	}
	p.until = now.Add(wait)
	s.paused[q] = p
}

func (s *Service) unpause(q string) {
	s.mu.Lock()
	delete(s.paused, q)
	s.mu.Unlock()
}

// dispatchOnce claims, for every active deployment served, as many requests as it has free slots, and starts
// each in its own goroutine. A deployment with no ready address has no slot, so its requests wait (until the
// scale-to-zero work lets a queued request wake it).
func (s *Service) dispatchOnce(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	v := s.opts.View()
	for _, name := range v.Namespaces() {
		ns := v.Namespace(name)
		if ns == nil {
			continue
		}
		for _, d := range ns.Deployments {
			if !d.Active {
				continue
			}
			q := queue.QueueOf(name, d.ID)
			now := s.opts.Clock.Now()
			if s.isPaused(q, now) {
				continue
			}
			// The store compares slots with the requests of the queue running on every replica, so each claim
			// passes the total; the loop ends when the queue is empty or the slots are full.
			slots := s.slots(name, d)
			for range max(slots, 0) {
				r, expired, err := s.opts.Store.Claim(ctx, q, s.opts.Owner, now, s.opts.Lease, slots)
				s.metrics.expired.Add(float64(expired))
				if err != nil {
					if ctx.Err() == nil {
						s.opts.Logger.Error(err, "Failed to claim async requests", "queue", q)
					}
					break
				}
				if r == nil {
					break
				}
				s.metrics.timeInQueue.WithLabelValues(name, d.ID).Observe(now.Sub(r.StatusAt).Seconds())
				s.wg.Add(1)
				go s.run(ctx, name, *d, r)
			}
		}
	}
}

// verdict is what a run's model call means for the request.
type verdict int

const (
	succeed verdict = iota
	// retry: a retryable failure (500, 502, 503, 504, unreachable): another attempt after the delay, or FAILED
	// after max_attempts.
	retry
	// fail: FAILED now.
	fail
	// requeue: back in the queue, no attempt counted (the model answered 429, had no ready address, or this
	// replica is stopping).
	requeue
)

// classify maps a call's outcome onto what happens to the request and the error it records. Pure.
func classify(status int, err error) (verdict, queue.Error) {
	var ue *upstream.Error
	if errors.As(err, &ue) {
		switch ue.Kind {
		case upstream.KindCanceled:
			return requeue, queue.Error{}
		case upstream.KindTimeout:
			return fail, queue.Error{Code: queue.CodePredictTimeout, Message: "The model did not answer within " + ue.Timeout.String() + "."}
		case upstream.KindUnavailable:
			return retry, queue.Error{Code: queue.CodeUnavailable, Message: "The model could not be reached."}
		case upstream.KindCredentials:
			return fail, queue.Error{Code: queue.CodeInternalError, Message: "The model's credentials could not be read."}
		case upstream.KindStatus:
			status = ue.Status
		}
	} else if err != nil {
		return fail, queue.Error{Code: queue.CodeInternalError, Message: "The model call failed inside the gateway."}
	}
	msg := "The model answered " + strconv.Itoa(status) + "."
	switch {
	case status >= 200 && status < 300:
		return succeed, queue.Error{}
	case status == http.StatusTooManyRequests:
		return requeue, queue.Error{Code: queue.CodeUnavailable, Message: msg}
	case status == 500 || status == 502 || status == 503 || status == 504:
		return retry, queue.Error{Code: queue.CodePredictError, Message: msg}
	case status >= 400 && status < 500:
		return fail, queue.Error{Code: queue.CodeInvalidInput, Message: msg}
	}
	return fail, queue.Error{Code: queue.CodePredictError, Message: msg}
}

// retryDelay is the wait before attempt n+1 after n failed attempts: initial_delay_ms doubled per attempt,
// capped at max_delay_ms. Pure.
func retryDelay(rc queue.RetryConfig, attempts int) time.Duration {
	d := rc.InitialDelayMs
	for i := 1; i < attempts && d < rc.MaxDelayMs; i++ {
		d *= 2
	}
	return time.Duration(min(d, rc.MaxDelayMs)) * time.Millisecond
}

// sink collects a model's answer for a worker with no client connection.
type sink struct {
	header http.Header
	status int
	body   bytes.Buffer
	over   bool
}

func (k *sink) Header() http.Header { return k.header }
func (k *sink) WriteHeader(s int)   { k.status = s }
func (k *sink) Flush()              {}
func (k *sink) Write(b []byte) (int, error) {
	if k.body.Len()+len(b) > maxOutputBytes {
		k.over = true
		return 0, errors.New("answer larger than the async output limit")
	}
	return k.body.Write(b)
}

// run makes one attempt of r on d under a lease it keeps alive, and records the outcome.
func (s *Service) run(ctx context.Context, namespace string, d snapshot.Deployment, r *queue.Request) {
	defer s.wg.Done()
	defer s.wake()
	log := s.opts.Logger.WithValues("requestID", r.ID, "namespace", namespace, "deployment", d.ID)
	callCtx, cancelCall := context.WithCancel(ctx)
	defer cancelCall()
	lost := make(chan struct{})
	go s.heartbeat(callCtx, r.ID, cancelCall, lost)

	q := r.Queue()
	callCtx, span := s.startDispatch(callCtx, r)
	start := time.Now()
	status, header, out, err := s.call(callCtx, namespace, &d, r)
	elapsed := time.Since(start)
	endDispatch(span, status, err)
	// Record the outcome even when ctx ended: a stopping replica puts the request back at once.
	rec, cancelRec := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelRec()
	select {
	case <-lost:
		log.Info("Lost the lease of an async request while running it; another run records its outcome")
		return
	default:
	}
	now := s.opts.Clock.Now().UTC()
	v, e := classify(status, err)
	if errors.Is(err, errNotReady) {
		v, e = requeue, queue.Error{}
	} else {
		s.logAttempt(namespace, d.ID, r, status, e, elapsed)
	}
	attempts := r.Attempts
	switch v {
	case succeed:
		s.unpause(q)
		err = s.opts.Store.Finish(rec, r.ID, s.opts.Owner, now, queue.Outcome{Status: queue.Succeeded, Output: out, Errors: []queue.Error{}, Attempts: attempts + 1})
		s.metrics.duration.WithLabelValues(namespace, d.ID, queue.Succeeded).Observe(now.Sub(r.CreatedAt).Seconds())
	case fail:
		err = s.opts.Store.Finish(rec, r.ID, s.opts.Owner, now, queue.Outcome{Status: queue.Failed, Errors: []queue.Error{e}, Attempts: attempts + 1})
		s.metrics.duration.WithLabelValues(namespace, d.ID, queue.Failed).Observe(now.Sub(r.CreatedAt).Seconds())
	case retry:
		attempts++
		if status == http.StatusServiceUnavailable {
			s.backoff(q, now, upstream.RetryAfter(header, now))
		}
		if attempts >= r.Retry.MaxAttempts {
			e.Message += fmt.Sprintf(" Gave up after %d attempts.", attempts)
			err = s.opts.Store.Finish(rec, r.ID, s.opts.Owner, now, queue.Outcome{Status: queue.Failed, Errors: []queue.Error{e}, Attempts: attempts})
			s.metrics.duration.WithLabelValues(namespace, d.ID, queue.Failed).Observe(now.Sub(r.CreatedAt).Seconds())
		} else {
			err = s.opts.Store.Retry(rec, r.ID, s.opts.Owner, now, now.Add(retryDelay(r.Retry, attempts)), attempts, []queue.Error{e})
		}
	case requeue:
		delay := time.Duration(0)
		if status == http.StatusTooManyRequests {
			s.backoff(q, now, upstream.RetryAfter(header, now))
		} else if errors.Is(err, errNotReady) {
			delay = pauseMin
		}
		errs := r.Errors
		if e.Code != "" {
			errs = []queue.Error{e}
		}
		err = s.opts.Store.Retry(rec, r.ID, s.opts.Owner, now, now.Add(delay), attempts, errs)
	}
	if err != nil && !errors.Is(err, queue.ErrLeaseLost) {
		log.Error(err, "Failed to record the outcome of an async request; its lease will put it back")
	}
}

var errNotReady = errors.New("no ready address")

// logAttempt adds an attempt of r that called deployment to the deployment's request log, under r's id (which
// the model server received as X-Request-Id): "async attempt 2: 503 12ms", or the error in place of the status
// when no answer came.
func (s *Service) logAttempt(namespace, deployment string, r *queue.Request, status int, e queue.Error, elapsed time.Duration) {
	if s.opts.RequestLog == nil {
		return
	}
	outcome, level := strconv.Itoa(status), requestlog.LevelOf(status)
	if status == 0 {
		outcome, level = e.Message, requestlog.LevelError
	}
	s.opts.RequestLog.Add(namespace, deployment, requestlog.Entry{
		Time: s.opts.Clock.Now(), Level: level, RequestID: r.ID,
		Message: fmt.Sprintf("async attempt %d: %s %dms", r.Attempts+1, outcome, elapsed.Milliseconds()),
	})
}

// call sends r's input to d's predict path through the route step and forwarding core of sync calls.
func (s *Service) call(ctx context.Context, namespace string, d *snapshot.Deployment, r *queue.Request) (int, http.Header, json.RawMessage, error) {
	target, release, rerr := route.Deployment(namespace, d, s.opts.Addresses)
	if rerr != nil {
		return 0, nil, nil, errNotReady
	}
	defer release()
	if s.opts.Calls != nil {
		defer s.opts.Calls.BeginQueued(namespace, d.ID)()
	}
	k := &sink{header: http.Header{}}
	header := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}, requestlog.Header: {r.ID}}
	s.opts.Tracer.Inject(ctx, header)
	_, err := s.opts.Upstream.Forward(ctx, upstream.Request{Target: target, Body: bytes.NewReader(r.Input),
		ContentLength: int64(len(r.Input)), Header: header}, k)
	if ue := (*upstream.Error)(nil); errors.As(err, &ue) && ue.Kind == upstream.KindStatus {
		// An error status with a body that is not JSON (a plain-text 429 or 503, say) is an answer all the same:
		// its status and Retry-After pace the queue as a JSON one's do.
		return ue.Status, ue.Header, nil, err
	}
	if err != nil {
		return 0, nil, nil, err
	}
	if k.over {
		return 0, nil, nil, errors.New("answer too large")
	}
	out := k.body.Bytes()
	if !json.Valid(out) {
		// The webhook's data is JSON: a non-JSON answer travels as a JSON string.
		out, _ = json.Marshal(k.body.String())
	}
	return k.status, k.header, out, nil
}

// heartbeat extends the lease of id every third of the lease until ctx ends; when the lease is lost it cancels
// the call and closes lost.
func (s *Service) heartbeat(ctx context.Context, id string, cancelCall context.CancelFunc, lost chan struct{}) {
	t := time.NewTicker(s.opts.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.opts.Store.Heartbeat(ctx, id, s.opts.Owner, s.opts.Clock.Now().Add(s.opts.Lease))
		if errors.Is(err, queue.ErrLeaseLost) || errors.Is(err, queue.ErrNotFound) {
			close(lost)
			cancelCall()
			return
		}
	}
}

func (s *Service) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sw, err := s.opts.Store.Sweep(ctx, s.opts.Clock.Now().UTC(), s.opts.Retention)
		if err != nil {
			if ctx.Err() == nil {
				s.opts.Logger.Error(err, "Failed to sweep the async queues")
			}
			continue
		}
		s.metrics.expired.Add(float64(sw.Expired))
		s.metrics.requeued.Add(float64(sw.Requeued))
		if sw.Requeued > 0 {
			s.wake()
		}
		s.countDepths(ctx)
	}
}

// wakeIfIdle asks for a wake of d when it is active, runs behind a Service and has no ready address: a queued
// request wakes a deployment scaled to zero, as a sync call does. The Waker coalesces the asks per deployment, so
// asking on every sweep costs one patch per wake interval at most.
func (s *Service) wakeIfIdle(namespace string, d *snapshot.Deployment) {
	if s.opts.Waker == nil || s.opts.Addresses == nil || !d.Active || d.Kind != snapshot.DeploymentService {
		return
	}
	if s.opts.Addresses.Ready(namespace, d.Service, d.PortName) == 0 {
		s.opts.Waker.Ask(route.WakeTarget(namespace, d))
	}
}

// countDepths refreshes the queue depth gauge of every active deployment served.
func (s *Service) countDepths(ctx context.Context) {
	v := s.opts.View()
	for _, name := range v.Namespaces() {
		ns := v.Namespace(name)
		if ns == nil {
			continue
		}
		for _, d := range ns.Deployments {
			queued, running, err := s.opts.Store.Depth(ctx, queue.QueueOf(name, d.ID))
			if err != nil {
				return
			}
			s.metrics.depth.WithLabelValues(name, d.ID, "queued").Set(float64(queued))
			s.metrics.depth.WithLabelValues(name, d.ID, "in_progress").Set(float64(running))
			if queued > 0 {
				s.wakeIfIdle(name, d)
			}
		}
	}
}
