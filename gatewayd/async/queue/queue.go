// Package queue is the durable store of async inference requests (docs/rest-api.md "Async inference"): one
// Store interface with two backends, bbolt in the embedded store (one replica) and Redis (several replicas). It owns
// the request records, the per-deployment priority queues, worker leases, the retry delays, expiry, the result
// webhook outbox and retention. Every transition is one bbolt transaction or one Lua script, so a crash between
// two steps never leaves a request both queued and running, and two replicas never run one request at once.
//
// The store takes the time of every call as an argument, so expiry, leases and retention are tested with a fake
// clock; the callers (gatewayd/async) pass their clock's now.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Status is a request's status (docs/rest-api.md "Async inference", States).
type Status = string

// Statuses.
const (
	Queued        Status = "QUEUED"
	InProgress    Status = "IN_PROGRESS"
	Succeeded     Status = "SUCCEEDED"
	Failed        Status = "FAILED"
	Expired       Status = "EXPIRED"
	Canceled      Status = "CANCELED"
	WebhookFailed Status = "WEBHOOK_FAILED"
)

// Webhook statuses.
const (
	HookNone      = "NO_WEBHOOK_PROVIDED"
	HookPending   = "PENDING"
	HookSucceeded = "SUCCEEDED"
	HookFailed    = "FAILED"
	HookCanceled  = "CANCELED"
)

// Error codes of a request's errors[] (docs/rest-api.md "Async inference", Errors).
const (
	CodePredictError   = "MODEL_PREDICT_ERROR"
	CodePredictTimeout = "MODEL_PREDICT_TIMEOUT"
	CodeNotReady       = "MODEL_NOT_READY"
	CodeDoesNotExist   = "MODEL_DOES_NOT_EXIST"
	CodeUnavailable    = "MODEL_UNAVAILABLE"
	CodeInvalidInput   = "MODEL_INVALID_INPUT"
	CodeInternalError  = "INTERNAL_SERVER_ERROR"
)

const (
	// maxScanPerClaim bounds the expired or delayed requests one Claim steps over.
	maxScanPerClaim = 100
	// maxSweepPerStep bounds the requests one Sweep step handles, so a sweep never holds the store long.
	maxSweepPerStep = 500
)

// ErrNotFound: no request has the id (never existed, or removed after its retention).
var ErrNotFound = errors.New("async request not found")

// ErrKeyFull: the key that sends the request already has Request.KeyCap requests waiting or running; nothing was
// stored.
var ErrKeyFull = errors.New("the key has as many async requests queued or in progress as it may")

// ErrLeaseLost: the caller no longer holds the request's lease (it expired and the request went back to the
// queue, or another worker claimed it). The caller drops its outcome; the run that holds the lease records one.
var ErrLeaseLost = errors.New("async request lease lost")

// Error is one entry of a request's errors.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// RetryConfig is a request's inference_retry_config.
type RetryConfig struct {
	MaxAttempts    int   `json:"max_attempts"`
	InitialDelayMs int64 `json:"initial_delay_ms"`
	MaxDelayMs     int64 `json:"max_delay_ms"`
}

// Request is one async request and where it stands.
type Request struct {
	ID           string `json:"id"`
	Namespace    string `json:"namespace"`
	ModelID      string `json:"modelID"`
	DeploymentID string `json:"deploymentID"`
	// Environment is the environment the request was sent through, "" for a deployment route; it decides, with
	// the model, which keys may read and cancel it.
	Environment string `json:"environment,omitempty"`
	// Input is model_input, sent as the JSON body of the deployment's predict path. Backends keep its bytes as
	// they came (encoding/json would compact a RawMessage).
	Input json.RawMessage `json:"-"`
	// Key is the key that sent the request (namespace and prefix), "" when none is counted. A store counts the
	// requests of each key that are QUEUED or IN_PROGRESS, so one key cannot fill the store (docs/security.md).
	Key string `json:"key,omitempty"`
	// KeyCap is how many requests of Key may be QUEUED or IN_PROGRESS at once, checked by Enqueue and
	// EnqueueClaimed (ErrKeyFull past it); 0 for no cap. It is an argument of the enqueue, not stored.
	KeyCap int `json:"-"`
	// Webhook is webhook_endpoint, "" for none.
	Webhook               string      `json:"webhook,omitempty"`
	Priority              int         `json:"priority"`
	MaxTimeInQueueSeconds int64       `json:"maxTimeInQueueSeconds"`
	Retry                 RetryConfig `json:"retry"`

	Status        Status    `json:"status"`
	WebhookStatus string    `json:"webhookStatus"`
	CreatedAt     time.Time `json:"createdAt"`
	StatusAt      time.Time `json:"statusAt"`
	// NotBefore delays a request queued again after a retryable error.
	NotBefore time.Time `json:"notBefore,omitzero"`
	// Attempts counts the calls made to the model.
	Attempts int     `json:"attempts"`
	Errors   []Error `json:"errors"`
	// Output is the model's JSON answer, kept only until the webhook delivered it (or gave up).
	Output json.RawMessage `json:"-"`
	// Owner and LeaseUntil are the worker running the request and until when its lease holds.
	Owner      string    `json:"owner,omitempty"`
	LeaseUntil time.Time `json:"leaseUntil,omitzero"`
	// WebhookAttempts counts failed deliveries; WebhookNext is when the next one is due.
	WebhookAttempts int       `json:"webhookAttempts,omitempty"`
	WebhookNext     time.Time `json:"webhookNext,omitzero"`
	// TraceParent is the W3C traceparent of the span that accepted the request, "" with tracing off: its dispatch
	// and webhook delivery, on whichever replica, join that trace (docs/operations.md "Traces").
	TraceParent string `json:"traceParent,omitempty"`
}

// Queue names the queue of the request's deployment.
func (r *Request) Queue() string { return QueueOf(r.Namespace, r.DeploymentID) }

// Deadline is when a request still queued expires: max_time_in_queue_seconds after it was created. It applies
// to a request queued again after a retry too, which bounds how long backoff and retries can keep one alive.
func (r *Request) Deadline() time.Time {
	return r.CreatedAt.Add(time.Duration(r.MaxTimeInQueueSeconds) * time.Second)
}

// Terminal reports whether the request reached an end state (its webhook may still be pending).
func (r *Request) Terminal() bool { return r.Status != Queued && r.Status != InProgress }

// QueueOf names the queue of a deployment of a workspace.
func QueueOf(namespace, deploymentID string) string { return namespace + "/" + deploymentID }

// endedWebhookStatus is the webhook status of a request that ends without a result: CANCELED when it had a
// webhook (which now delivers nothing).
func endedWebhookStatus(webhook string) string {
	if webhook == "" {
		return HookNone
	}
	return HookCanceled
}

// Outcome is how a run ended: Succeeded with the model's Output, or Failed with Errors.
type Outcome struct {
	Status   Status
	Output   json.RawMessage
	Errors   []Error
	Attempts int
}

// Swept counts what one Sweep did.
type Swept struct {
	// Requeued were IN_PROGRESS with an expired lease (a lost worker) and are QUEUED again.
	Requeued int
	// Expired were QUEUED past their deadline.
	Expired int
	// Removed ended more than the retention ago (and owed no webhook).
	Removed int
}

// WebhookResult is the outcome of one delivery attempt.
type WebhookResult int

// Webhook results.
const (
	// Delivered: the receiver answered 2xx. The output is dropped.
	Delivered WebhookResult = iota
	// RetryLater: the attempt failed; the next one is due at the given time.
	RetryLater
	// GiveUp: delivery is abandoned; the request becomes WEBHOOK_FAILED and the output is dropped.
	GiveUp
)

// Store keeps async requests. Times are passed in, never read from a clock.
type Store interface {
	// Enqueue stores a new QUEUED request.
	Enqueue(ctx context.Context, r *Request) error
	// Get returns the request with id, or ErrNotFound.
	Get(ctx context.Context, id string) (*Request, error)
	// Cancel moves a QUEUED request to CANCELED and reports whether it did; a request in any other state is
	// returned unchanged with false. ErrNotFound when there is none.
	Cancel(ctx context.Context, id string, now time.Time) (*Request, bool, error)
	// Claim takes the first request of queue by (priority, enqueue time) whose retry delay has passed, unless
	// maxInProgress (when positive) requests of the queue already run. It leases it to owner until now+lease and
	// marks it IN_PROGRESS. Requests past their deadline met on the way are EXPIRED, and counted. A nil request
	// means none was claimed.
	Claim(ctx context.Context, queue, owner string, now time.Time, lease time.Duration, maxInProgress int) (*Request, int, error)
	// Heartbeat extends owner's lease on id until until; ErrLeaseLost when owner no longer holds it.
	Heartbeat(ctx context.Context, id, owner string, until time.Time) error
	// Retry puts a request owner runs back in the queue (QUEUED), due at notBefore, with the attempts made so
	// far and the errors met; ErrLeaseLost when owner no longer holds it.
	Retry(ctx context.Context, id, owner string, now, notBefore time.Time, attempts int, errs []Error) error
	// Finish ends a request owner runs with out (SUCCEEDED or FAILED). With a webhook its webhook status is
	// PENDING, the output is kept and the request enters the outbox; without, the output is dropped.
	// ErrLeaseLost when owner no longer holds it.
	Finish(ctx context.Context, id, owner string, now time.Time, out Outcome) error
	// Depth counts the queued (delayed included) and in-progress requests of queue.
	Depth(ctx context.Context, queue string) (queued, inProgress int, err error)
	// DueWebhooks returns up to n requests whose delivery is due at now and holds them until now+hold, so two
	// replicas do not deliver one result at the same time (a replica that dies holding one frees it at the end
	// of the hold).
	DueWebhooks(ctx context.Context, now time.Time, hold time.Duration, n int) ([]*Request, error)
	// WebhookDone records a delivery attempt of id: Delivered, RetryLater (at next) or GiveUp.
	WebhookDone(ctx context.Context, id string, now time.Time, res WebhookResult, next time.Time) error
	// Sweep puts back requests whose lease expired, expires queued requests past their deadline, and removes
	// requests that ended before now-retention and owe no webhook.
	Sweep(ctx context.Context, now time.Time, retention time.Duration) (Swept, error)
}

// Direct is implemented by a store that can enqueue a request and claim it in the same step when nothing else
// waits in its queue and a slot is free, which saves an idle deployment one durable write between acceptance
// and dispatch. The request is stored either way: claimed (IN_PROGRESS, leased to owner) or QUEUED.
type Direct interface {
	EnqueueClaimed(ctx context.Context, r *Request, owner string, now time.Time, lease time.Duration, maxInProgress int) (claimed bool, err error)
}
