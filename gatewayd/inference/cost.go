package inference

import (
	"github.com/modelgate/modelgate/api/v1alpha1/pricing"
	"github.com/modelgate/modelgate/gatewayd/failover"
)

// callCost is what a call costs, in micro-USD: the usage its answering try reported at that target's prices, as
// the view the call was routed with holds them (res.Target points into that view's Endpoint, so a snapshot that
// reprices the target while the call runs does not change it; docs/decisions.md "Prices and cost"). A call no
// target answered, or one of an unpriced target, costs 0. An upstream that reports only a total is priced at the
// higher of the target's two prices, so a budget is never charged less than the tokens could have cost. inputPart
// is the cost of the input tokens alone, rounded on its own: the metric splits the cost by token type with it,
// and the output's share is the rest, so the two parts always add up to the call's cost.
func callCost(res *failover.Result) (cost, inputPart int64) {
	if res.Target == nil {
		return 0, 0
	}
	p, u := res.Target.Price, res.Usage
	if u.PromptTokens+u.CompletionTokens <= 0 && u.TotalTokens > 0 {
		return pricing.Cost(pricing.Pricing{Output: max(p.Input, p.Output)}, 0, u.TotalTokens), 0
	}
	return pricing.Cost(p, u.PromptTokens, u.CompletionTokens), pricing.Cost(p, u.PromptTokens, 0)
}
