package inference

import (
	"strings"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// newRequestID is the request id gatewayd gives a model call on the OpenAI routes.
func newRequestID() string { return ids.New(ids.Request) }

// recordBilling queues the billing event of one call; it goes to the webhook outbox when the workspace names
// a billing webhook.
func (h *Handler) recordBilling(key *view.Key, c *call, w *statusWriter, u upstream.Usage) {
	ns := key.Group.Namespace
	n := h.opts.View().Namespace(ns)
	rec := billing.Record{
		Namespace: ns,
		Refusal:   c.refusal,
		Deliver:   n != nil && n.Snapshot != nil && n.Snapshot.Workspace.BillingWebhook != nil,
		Event: billing.Event{
			IdempotencyKey: "evt_" + strings.TrimPrefix(c.requestID, "req_"), Timestamp: h.opts.Clock.Now().UTC(),
			RequestID: c.requestID, ModelSlug: c.model, ExternalEntityID: key.Group.ExternalEntityID, GroupID: key.Group.ID,
			APIKeyPrefix: key.Prefix, StatusCode: w.code(),
			Tokens:       billing.Tokens{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens},
			CostMicroUsd: c.cost, Attempts: c.tries.Attempts,
		},
	}
	if t := c.tries.Target; t != nil {
		rec.Event.Target, rec.Event.Provider = t.Name, t.Provider
	}
	h.opts.Billing.Record(rec)
}
