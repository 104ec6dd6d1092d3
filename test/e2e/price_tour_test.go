package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/apibody"
	"github.com/modelgate/modelgate/test/stack"
)

// TestPriceTour walks the README's price step: the demo Endpoint's target priced at 2.50 and 10 USD per million
// tokens (as kubectl patch writes it) reads back through REST, and a call of "hello" (1 prompt token, 5 completion
// tokens) then costs 1 × 2.50 + 5 × 10 = 52.5 micro-USD, rounded half up to 53, on its billing event. Calls
// routed before gatewayd served the price cost 0: the demo target had none. Then the README's budget step: the
// group's COST MONTH budget of 100 micro-USD admits a second call (53 spent, below it) and refuses the third
// (106 spent) with the usage limit's 429.
func TestPriceTour(t *testing.T) {
	s := theStack(t)
	ctx := context.Background()
	ext := "e2e-price-" + randomBase62(t, 6)
	r := admin(t, s, http.MethodPost, "/v1/gateway/groups", apibody.Group(ext, "INDEPENDENT", nil, apibody.Model(stack.EndpointSlug, nil,
		[]map[string]any{{"type": "COST", "unit": "MONTH", "threshold": 100}})))
	expect(t, r, http.StatusCreated, "")
	group := str(t, r.body, "id")
	r = admin(t, s, http.MethodPost, "/v1/gateway/groups/"+group+"/api_keys", map[string]any{"name": "price"})
	expect(t, r, http.StatusCreated, "")
	key := str(t, r.body, "api_key")

	setPrice := func(p *gatewayv1.EndpointPricing) {
		t.Helper()
		var ep gatewayv1.Endpoint
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: stack.EndpointName}, &ep); err != nil {
			t.Fatal(err)
		}
		ep.Spec.Targets[0].Pricing = p
		if err := s.Client.Update(ctx, &ep); err != nil {
			t.Fatal(err)
		}
	}
	setPrice(&gatewayv1.EndpointPricing{InputPerMillionTokens: "2.50", OutputPerMillionTokens: "10"})
	t.Cleanup(func() { setPrice(nil) })

	r = admin(t, s, http.MethodGet, "/v1/gateway/endpoints/"+stack.EndpointName, nil)
	expect(t, r, http.StatusOK, "")
	if got := fmt.Sprint(r.body["targets"].([]any)[0].(map[string]any)["pricing"]); got != "map[input_per_million_tokens:2.50 output_per_million_tokens:10]" {
		t.Fatalf("the Endpoint's target pricing reads back as %s", got)
	}

	// The snapshot reaches gatewayd shortly after the write: call until a call is priced, each call's event
	// read by its request id.
	cost := func(requestID string) float64 {
		t.Helper()
		for range 200 {
			r := admin(t, s, http.MethodGet, "/v1/gateway/events?limit=1000&external_entity_ids="+ext, nil)
			expect(t, r, http.StatusOK, "")
			for _, it := range r.body["items"].([]any) {
				if e := it.(map[string]any); e["requestId"] == requestID {
					c, ok := e["costMicroUsd"].(float64)
					if !ok {
						t.Fatalf("event %s has no costMicroUsd: %v", requestID, e)
					}
					return c
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("no billing event for request %s", requestID)
		return 0
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := send(t, http.MethodPost, s.GatewayURL+"/v1/chat/completions", "Api-Key "+key, map[string]any{
			"model": stack.EndpointSlug, "messages": []any{map[string]any{"role": "user", "content": "hello"}},
		})
		if r.code == http.StatusUnauthorized && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // the new key reaches gatewayd's view a moment after the mint
			continue
		}
		expect(t, r, http.StatusOK, "")
		c := cost(r.header.Get("X-Request-Id"))
		if c == 53 {
			break
		}
		if c != 0 || time.Now().After(deadline) {
			t.Fatalf("a call of \"hello\" costs %v micro-USD, want 53 at the new price (0 only before gatewayd serves it)", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	call := func() response {
		return send(t, http.MethodPost, s.GatewayURL+"/v1/chat/completions", "Api-Key "+key, map[string]any{
			"model": stack.EndpointSlug, "messages": []any{map[string]any{"role": "user", "content": "hello"}},
		})
	}
	r = call()
	expect(t, r, http.StatusOK, "")
	// Its event is recorded after its cost is charged: the next call is judged on 106 spent.
	if c := cost(r.header.Get("X-Request-Id")); c != 53 {
		t.Fatalf("the second priced call costs %v micro-USD, want 53", c)
	}
	expect(t, call(), http.StatusTooManyRequests, "usage_limit_exceeded")
}
