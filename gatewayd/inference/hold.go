package inference

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/route"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// Holding a call while its deployment starts (docs/rest-api.md "Model calls: wake"): a predict call to an active
// deployment behind a Service with no ready address asks for a wake (gatewayd/wake, one patch per deployment
// however many calls wait) and waits on the EndpointSlice watch's change signal, never polling, until an address
// is ready or min(startupTimeoutSeconds, the hold timeout) has passed.
//
// While it waits, the call's body is read into memory (heldBody): Go's server notices a client that leaves only
// through a read of its connection, and a body nobody reads is never read, so without it a client that gave up
// would still be forwarded once the model came up. The body is capped as every predict body is, and the bytes
// held count against the key's in-flight bytes.

// DefaultHoldTimeout bounds how long a call waits for a deployment to start when Options.HoldTimeout is zero.
const DefaultHoldTimeout = 5 * time.Minute

// holdRetryAfter is the Retry-After, in seconds, of a call that waited in vain: the model may still be starting.
const holdRetryAfter = 5

// errClientGone is hold's verdict on a call whose client left while it waited. It is recorded (499), not sent.
var errClientGone = httperr.New(statusClientClosed, httperr.CodeClientError, "The client left while the call was held.", nil)

// holds reports whether a call to d that finds no ready address is held: a Service has pods that a wake can start;
// a url deployment has none, and its readiness is the manager's probe.
func (h *Handler) holds(d *snapshot.Deployment) bool {
	return d.Kind == snapshot.DeploymentService && h.opts.Addresses != nil
}

// holdTimeout is how long a call to d is held: the hold timeout, or d's startup timeout when shorter.
func (h *Handler) holdTimeout(d *snapshot.Deployment) time.Duration {
	t := h.opts.HoldTimeout
	if s := time.Duration(d.StartupTimeoutSeconds) * time.Second; s > 0 && s < t {
		t = s
	}
	return t
}

// hold asks for a wake of d and waits for a ready address of it, reading body meanwhile. It returns the target and
// its release once an address is picked, with the body to forward; or 503 model_not_ready once the hold timeout
// passes, errClientGone when the client leaves, 413 or 429 when the body is too large to hold. The returned body,
// when not nil, must be stopped once the call ends.
//
// When env names an environment, the call resolves it again at each swap of the view; when it points elsewhere
// (a promotion while the call waits), the call moves there: moved is told, a wake is asked for the new deployment
// if it has no ready address either, and the call waits for it instead, within the same hold timeout.
func (h *Handler) hold(w http.ResponseWriter, r *http.Request, caller auth.Caller, d *snapshot.Deployment, body io.Reader,
	env environmentRoute, moved func(*snapshot.Deployment)) (upstream.Target, func(), *heldBody, *httperr.Error) {
	timeout := h.holdTimeout(d)
	held := h.opts.Metrics.held.WithLabelValues(caller.Namespace, d.ModelID)
	held.Inc()
	defer held.Dec()
	follow := env.environment != "" && h.opts.ViewChanged != nil

	// The body's read deadline covers the hold, then the read as on any call.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout + h.opts.BodyReadTimeout))
	slot := caller.Namespace + "/" + caller.Key.Prefix
	hb := newHeldBody(body, func(n int64) bool { return h.inflight.acquire(slot, n) }, func(n int64) { h.inflight.release(slot, n) })

	// The client's context ends when it leaves (the held body's read notices); the body's failures end it too.
	ctx, cancel := context.WithTimeoutCause(r.Context(), timeout, errHoldTimeout)
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	go func() {
		select {
		case <-hb.failed:
			fail(hb.readErr())
		case <-ctx.Done():
		}
	}()

	// Right after gatewayd starts, the watch may not have listed the addresses yet: none seen is not none there.
	// Wake only a deployment that truly has none.
	verdict := func() *httperr.Error {
		return holdVerdict(r.Context(), context.Cause(ctx), d, timeout, h.opts.MaxBodyBytes, h.opts.MaxInFlightBytesPerKey)
	}
	select {
	case <-h.opts.Addresses.Synced():
	case <-ctx.Done():
		return upstream.Target{}, nil, hb, verdict()
	}
	if t, release, rerr := route.Deployment(caller.Namespace, d, h.opts.Addresses); rerr == nil {
		hb.endHold()
		return t, release, hb, nil
	}
	h.askWake(caller.Namespace, d)
	for {
		var changed <-chan struct{}
		if follow {
			// Taken before the view is read, so that a swap in between is not missed.
			changed = h.opts.ViewChanged()
			if to := h.resolve(caller, env); to != nil && to.ID != d.ID {
				d = to
				moved(to)
				t, release, rerr := route.Deployment(caller.Namespace, d, h.opts.Addresses)
				if rerr == nil {
					hb.endHold()
					return t, release, hb, nil
				}
				if !h.holds(d) {
					// A url deployment has no address to wait for: its readiness is the manager's probe.
					return upstream.Target{}, nil, hb, rerr
				}
				h.askWake(caller.Namespace, d)
			}
		}
		if err := h.waitReady(ctx, changed, caller.Namespace, d); err != nil && ctx.Err() != nil {
			return upstream.Target{}, nil, hb, verdict()
		}
		// Ready, or the view swapped. The address may be gone again by now: pick, or wait for the next one.
		if t, release, rerr := route.Deployment(caller.Namespace, d, h.opts.Addresses); rerr == nil {
			hb.endHold()
			return t, release, hb, nil
		}
	}
}

// askWake asks for a wake of d, once for every call held for it. The call waits for an address, not for the
// patch; a failed patch is the Waker's to log.
func (h *Handler) askWake(namespace string, d *snapshot.Deployment) {
	if h.opts.Waker != nil {
		h.opts.Waker.Ask(route.WakeTarget(namespace, d))
	}
}

// waitReady waits for a ready address of d, until changed is closed (never when nil), or until ctx ends.
func (h *Handler) waitReady(ctx context.Context, changed <-chan struct{}, namespace string, d *snapshot.Deployment) error {
	if changed == nil {
		return h.opts.Addresses.WaitReady(ctx, namespace, d.Service, d.PortName)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-wctx.Done():
		}
	}()
	return h.opts.Addresses.WaitReady(wctx, namespace, d.Service, d.PortName)
}

var (
	errHoldTimeout = errors.New("hold timeout")
	errHeldBytes   = errors.New("too many held body bytes for this key")
)

// holdVerdict maps why a hold ended without an address onto the call's answer.
func holdVerdict(client context.Context, cause error, d *snapshot.Deployment, timeout time.Duration, maxBody, maxHeld int64) *httperr.Error {
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(cause, errHoldTimeout):
		e := httperr.New(http.StatusServiceUnavailable, httperr.CodeModelNotReady,
			"The model did not become ready in time; it may still be starting: retry shortly.",
			fmt.Sprintf("deployment_id: %s; no ready replica after %s", d.ID, timeout))
		e.RetryAfter = holdRetryAfter
		return e
	case errors.As(cause, &tooBig):
		return ingress.TooLarge(maxBody)
	case errors.Is(cause, errHeldBytes):
		e := httperr.New(http.StatusTooManyRequests, httperr.CodeRateLimited,
			fmt.Sprintf("Too many request bytes held for this key while its model starts: at most %d at once.", maxHeld),
			map[string]any{"max_in_flight_bytes": maxHeld})
		e.RetryAfter = 1
		return e
	case client.Err() != nil:
		// The client left, or its connection failed (the server cancels the call's context on a failed read).
		return errClientGone
	}
	// The client is there but its body is not HTTP (a broken chunked encoding).
	return ingress.ReadFailed(cause)
}

// heldReadAhead is how far heldBody reads ahead of the forward once the hold has ended.
const heldReadAhead = 64 << 10

// heldBody reads a request body in the background from the start of a hold until its end (io.EOF or an error),
// and serves what it read, then the rest as it arrives, to the one reader that forwards the call. While the call
// is held it reads all it can, up to the body cap (body is capped), each byte reserved with acquire; once the
// hold ends (forwarding) the reservation is returned and it reads at most heldReadAhead ahead of the forward.
type heldBody struct {
	acquire func(int64) bool
	release func(int64)

	mu       sync.Mutex
	buf      []byte
	err      error // io.EOF at the body's end, or the read's error
	holding  bool
	reserved int64
	// more is closed and replaced when buf or err change; taken when Read takes bytes or the hold ends.
	more, taken chan struct{}
	// failed is closed on a read error other than io.EOF; stopping by stop; done when the background read has
	// returned.
	failed, stopping, done chan struct{}
	stopOnce               sync.Once
}

func newHeldBody(body io.Reader, acquire func(int64) bool, release func(int64)) *heldBody {
	b := &heldBody{acquire: acquire, release: release, holding: true, more: make(chan struct{}), taken: make(chan struct{}),
		failed: make(chan struct{}), stopping: make(chan struct{}), done: make(chan struct{})}
	go b.fill(body)
	return b
}

func (b *heldBody) fill(body io.Reader) {
	defer close(b.done)
	chunk := make([]byte, 32<<10)
	for b.room() {
		n, err := body.Read(chunk)
		b.mu.Lock()
		if n > 0 && b.holding {
			if b.acquire(int64(n)) {
				b.reserved += int64(n)
			} else {
				n, err = 0, errHeldBytes
			}
		}
		b.buf = append(b.buf, chunk[:n]...)
		if err != nil {
			b.err = err
		}
		signal(&b.more)
		b.mu.Unlock()
		if err != nil {
			if err != io.EOF {
				close(b.failed)
			}
			return
		}
	}
}

// room waits until the background read may read more: at once while holding, else once the forward has taken
// enough. It returns false when stop was called.
func (b *heldBody) room() bool {
	for {
		b.mu.Lock()
		if b.holding || len(b.buf) < heldReadAhead {
			b.mu.Unlock()
			return true
		}
		taken := b.taken
		b.mu.Unlock()
		select {
		case <-taken:
		case <-b.stopping:
			return false
		}
	}
}

// signal wakes the waiters of *ch; the caller holds the lock.
func signal(ch *chan struct{}) {
	close(*ch)
	*ch = make(chan struct{})
}

// Read serves the bytes read so far, waiting for more when there are none yet.
func (b *heldBody) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		if len(b.buf) > 0 {
			n := copy(p, b.buf)
			if b.buf = b.buf[n:]; len(b.buf) == 0 {
				b.buf = nil
			}
			signal(&b.taken)
			b.mu.Unlock()
			return n, nil
		}
		err, more := b.err, b.more
		b.mu.Unlock()
		if err != nil {
			return 0, err
		}
		<-more
	}
}

func (b *heldBody) readErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// endHold returns the bytes reserved while holding; from then on the read stays just ahead of the forward.
func (b *heldBody) endHold() {
	b.mu.Lock()
	n := b.reserved
	b.holding, b.reserved = false, 0
	signal(&b.taken)
	b.mu.Unlock()
	b.release(n)
}

// stop ends the background read before the handler returns (a handler must not leave a read of its body
// running): a read deadline in the past unblocks a read in progress. It then returns what is still reserved.
func (b *heldBody) stop(rc *http.ResponseController) {
	b.stopOnce.Do(func() { close(b.stopping) })
	select {
	case <-b.done:
	default:
		_ = rc.SetReadDeadline(time.Unix(1, 0))
		<-b.done
	}
	b.mu.Lock()
	if b.err == nil {
		// A forward still reading (the transport may, after the answer) gets an error, never a wait.
		b.err = io.ErrUnexpectedEOF
		signal(&b.more)
	}
	b.mu.Unlock()
	b.endHold()
}
