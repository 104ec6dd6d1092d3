package billing

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/gatewayd/stdwebhook"
)

// Target is where one workspace's events go.
type Target struct {
	URL string
	// Secret reads the signing secret (from the Workspace's Secret) when a batch is sent.
	Secret func(ctx context.Context) (string, error)
}

// DelivererOptions tune webhook delivery; zero values take the defaults.
type DelivererOptions struct {
	BatchSize  int           // events per POST; 50
	Poll       time.Duration // how often the outbox is scanned; 200ms
	MinBackoff time.Duration // first wait after a failure; 500ms, doubled per failure
	MaxBackoff time.Duration // 5m
	Retention  time.Duration // events older than this are pruned; 30 days
	Timeout    time.Duration // per POST; 10s
	Client     *http.Client
	Now        func() time.Time
}

// Deliverer drains the outbox to the webhooks. An entry leaves the outbox only after a 2xx, so delivery is at
// least once; a restart resumes from the durable outbox.
type Deliverer struct {
	store   Store
	targets func() map[string]Target
	opts    DelivererOptions

	mu    sync.Mutex
	state map[string]*backoff
}

type backoff struct {
	wait time.Duration
	next time.Time
}

// NewDeliverer delivers the outbox of store to the targets, looked up by namespace on every scan so that a
// webhook changed in the Workspace applies at once.
func NewDeliverer(store Store, targets func() map[string]Target, opts DelivererOptions) *Deliverer {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 50
	}
	if opts.Poll <= 0 {
		opts.Poll = 200 * time.Millisecond
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 500 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Minute
	}
	if opts.Retention <= 0 {
		opts.Retention = 30 * 24 * time.Hour
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Deliverer{store: store, targets: targets, opts: opts, state: map[string]*backoff{}}
}

// Run delivers until ctx is done.
func (d *Deliverer) Run(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx)
	t := time.NewTicker(d.opts.Poll)
	defer t.Stop()
	lastPrune := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := d.opts.Now()
		if now.Sub(lastPrune) > time.Hour {
			if err := d.store.Prune(ctx, now.Add(-d.opts.Retention)); err != nil {
				log.Error(err, "Failed to prune billing events")
			}
			lastPrune = now
		}
		d.Once(ctx)
	}
}

// Once sends at most one batch per namespace whose backoff has elapsed and reports how many events were
// delivered.
func (d *Deliverer) Once(ctx context.Context) int {
	log := logr.FromContextOrDiscard(ctx)
	nss, err := d.store.Outboxes(ctx)
	if err != nil {
		log.Error(err, "Failed to list billing outboxes")
		return 0
	}
	targets := d.targets()
	delivered := 0
	for _, ns := range nss {
		t, ok := targets[ns]
		if !ok {
			continue // kept until the workspace names a webhook again
		}
		d.mu.Lock()
		b := d.state[ns]
		if b == nil {
			b = &backoff{}
			d.state[ns] = b
		}
		wait := d.opts.Now().Before(b.next)
		d.mu.Unlock()
		if wait {
			continue
		}
		n, err := d.send(ctx, ns, t)
		d.mu.Lock()
		if err != nil {
			b.wait = min(max(b.wait*2, d.opts.MinBackoff), d.opts.MaxBackoff)
			b.next = d.opts.Now().Add(b.wait)
			log.Info("Billing webhook delivery failed; will retry", "namespace", ns, "retryIn", b.wait.String(), "reason", err.Error())
		} else {
			b.wait, b.next = 0, time.Time{}
			delivered += n
		}
		d.mu.Unlock()
	}
	return delivered
}

// send posts the oldest batch of ns and acknowledges it on a 2xx.
func (d *Deliverer) send(ctx context.Context, ns string, t Target) (int, error) {
	batch, err := d.store.Pending(ctx, ns, d.opts.BatchSize)
	if err != nil || len(batch) == 0 {
		return 0, err
	}
	secret, err := t.Secret(ctx)
	if err != nil {
		return 0, fmt.Errorf("failed to read the signing secret: %w", err)
	}
	events := make([]Event, len(batch))
	ids := make([]string, len(batch))
	for i, p := range batch {
		events[i], ids[i] = p.Event, p.ID
	}
	body, err := json.Marshal(map[string]any{"type": "API_BILLING_USAGE", "data": map[string]any{"events": events}})
	if err != nil {
		return 0, err
	}
	// The message id is derived from the events it carries, so a retry of the same batch keeps its id.
	sum := sha256.Sum256([]byte(strings.Join(ids, ",")))
	msgID := "msg_" + base64.RawURLEncoding.EncodeToString(sum[:18])
	if err := stdwebhook.Post(ctx, d.opts.Client, d.opts.Timeout, t.URL, secret, msgID, d.opts.Now().Unix(), body); err != nil {
		return 0, err
	}
	if err := d.store.Ack(ctx, ns, ids); err != nil {
		// Delivered but not acknowledged: it will be sent again, which at-least-once allows.
		return 0, err
	}
	return len(batch), nil
}
