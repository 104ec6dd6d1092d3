package async

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"sync"
	"time"

	"github.com/modelgate/modelgate/api/netguard"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/stdwebhook"
)

// webhookBatch is how many due results one scan takes; they are sent concurrently.
const webhookBatch = 32

// WebhookPayload is the body POSTed to a request's webhook_endpoint (docs/rest-api.md "Async inference").
type WebhookPayload struct {
	RequestID string `json:"request_id"`
	// ModelID is the model's id; a chain's request carries ChainID instead.
	ModelID      string          `json:"model_id,omitempty"`
	ChainID      string          `json:"chain_id,omitempty"`
	DeploymentID string          `json:"deployment_id"`
	Type         string          `json:"type"`
	Time         time.Time       `json:"time"`
	Data         json.RawMessage `json:"data"`
	Errors       []queue.Error   `json:"errors"`
}

// WebhookType is the payload's type.
const WebhookType = "async_request_completed"

// The result outbox is the store itself: a request whose webhook_status is PENDING is an outbox entry, due at
// its next attempt, so the result and its delivery state change in one transaction.
func (s *Service) webhookLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.deliverOnce(ctx)
	}
}

// deliverOnce sends every result due now, and records each attempt.
func (s *Service) deliverOnce(ctx context.Context) {
	now := s.opts.Clock.Now().UTC()
	// Held for longer than one POST can take, so another replica does not send the same result meanwhile.
	due, err := s.opts.Store.DueWebhooks(ctx, now, s.opts.WebhookTimeout+5*time.Second, webhookBatch)
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Logger.Error(err, "Failed to read due async webhooks")
		}
		return
	}
	var wg sync.WaitGroup
	for _, r := range due {
		wg.Add(1)
		go func() { defer wg.Done(); s.deliver(ctx, r) }()
	}
	wg.Wait()
}

func (s *Service) deliver(ctx context.Context, r *queue.Request) {
	postCtx, span := s.startDelivery(ctx, r)
	err := s.post(postCtx, r)
	now := s.opts.Clock.Now().UTC()
	res, next, outcome := queue.Delivered, time.Time{}, "delivered"
	if err != nil {
		attempts := r.WebhookAttempts + 1
		if attempts >= s.opts.WebhookAttempts {
			res, outcome = queue.GiveUp, "gave_up"
			s.opts.Logger.Info("Gave up delivering an async result", "requestID", r.ID, "namespace", r.Namespace, "attempts", attempts, "reason", reason(err))
		} else {
			wait := s.opts.WebhookMinBackoff
			for i := 1; i < attempts && wait < s.opts.WebhookMaxBackoff; i++ {
				wait *= 2
			}
			res, next, outcome = queue.RetryLater, now.Add(min(wait, s.opts.WebhookMaxBackoff)), "failed"
		}
	}
	endDelivery(span, outcome, err)
	rec, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.opts.Store.WebhookDone(rec, r.ID, now, res, next); err != nil {
		s.opts.Logger.Error(err, "Failed to record an async webhook delivery; it will be sent again", "requestID", r.ID)
		return
	}
	s.metrics.webhooks.WithLabelValues(outcome).Inc()
}

// reason is err without the URL that net/http puts in its errors: a caller's webhook URL may carry a token.
func reason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// post sends r's result, signed with its workspace's asyncWebhook secret by the one webhook sender (stdwebhook).
func (s *Service) post(ctx context.Context, r *queue.Request) error {
	if err := netguard.CheckURL(r.Webhook, s.opts.AllowInternalWebhooks); err != nil {
		return err
	}
	ns := s.opts.View().Namespace(r.Namespace)
	if ns == nil || ns.Snapshot == nil || ns.Snapshot.Workspace.AsyncWebhookSecret == nil || s.opts.Secret == nil {
		return errors.New("the workspace sets no asyncWebhook secret to sign with")
	}
	secret, err := s.opts.Secret(ctx, r.Namespace, ns.Snapshot.Workspace.AsyncWebhookSecret)
	if err != nil {
		return err
	}
	data := r.Output
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	errs := r.Errors
	if errs == nil {
		errs = []queue.Error{}
	}
	now := s.opts.Clock.Now().UTC()
	payload := WebhookPayload{RequestID: r.ID, ModelID: r.ModelID, DeploymentID: r.DeploymentID,
		Type: WebhookType, Time: now, Data: data, Errors: errs}
	if chain, ok := gatewayv1.ChainOfModelID(r.ModelID); ok {
		payload.ModelID, payload.ChainID, payload.DeploymentID = "", chain, s.chainDeploymentOf(r)
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	// The message id is the request id, so a receiver deduplicates retries of one result.
	return stdwebhook.Post(ctx, s.opts.WebhookClient, s.opts.WebhookTimeout, r.Webhook, secret, "msg_"+r.ID, now.Unix(), body)
}
