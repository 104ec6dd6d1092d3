// Package routing is what an Endpoint routes, in the snapshot's form (api/snapshot): the one translation of an
// Endpoint's spec, which the manager publishes and REST compares with what gatewayd serves to know a write is in
// force. Pure.
package routing

import (
	"cmp"
	"slices"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Snapshot is the snapshot's form of e: every target named (its own name, or "target-<index>") and weighted (an
// unset weight is 1); retry and cooldown only when the spec has them, so gatewayd applies its defaults and the
// snapshot of an Endpoint written before they existed is unchanged.
func Snapshot(e *gatewayv1.Endpoint) snapshot.Endpoint {
	out := snapshot.Endpoint{ID: e.Name, Slug: e.Spec.Slug, Targets: make([]snapshot.Target, len(e.Spec.Targets)), SharedModelAPI: e.Spec.SharedModelAPI}
	for i, t := range e.Spec.Targets {
		out.Targets[i] = snapshot.Target{
			Name: gatewayv1.TargetName(i, t.Name), Provider: string(t.Provider), BaseURL: t.BaseURL, TargetModel: t.TargetModel,
			// The API server defaults weight to 1; an object read from elsewhere may not carry it.
			Weight: max(t.Weight, 1), Priority: t.Priority, APIVersion: t.APIVersion, Region: t.Region,
		}
		if r := t.APIKeySecretRef; r != nil {
			out.Targets[i].APIKeySecret = &snapshot.SecretRef{Name: r.Name, Key: cmp.Or(r.Key, gatewayv1.DefaultKeySecretEntry)}
		}
		if p := t.Pricing; p != nil {
			out.Targets[i].Pricing = &snapshot.Pricing{InputPerMillionTokens: p.InputPerMillionTokens, OutputPerMillionTokens: p.OutputPerMillionTokens}
		}
	}
	if e.Spec.Timeout != nil {
		out.TimeoutMillis = e.Spec.Timeout.Milliseconds()
	}
	if r := e.Spec.Retry; r != nil {
		out.Retry = &snapshot.Retry{Attempts: r.Attempts, OnStatus: slices.Clone(r.OnStatus)}
	}
	if c := e.Spec.Cooldown; c != nil {
		out.Cooldown = &snapshot.Cooldown{Failures: c.Failures}
		if c.Duration != nil {
			out.Cooldown.DurationMillis = c.Duration.Milliseconds()
		}
	}
	return out
}
