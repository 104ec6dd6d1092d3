package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// TestRacingCascadingPatchesKeepTheChildServed lowers a CASCADING parent (50 -> 35) and raises its child (30 -> 45)
// at the same time, 20 times. The claim on (parent, limit) lets only one of the two through (docs/decisions.md),
// and whatever the interleaving, the child stays in the snapshot gatewayd serves (its keys keep working, and the
// parent's limit binds, since every call charges the parent too). Should both writes land (a cluster whose
// webhooks predate the claim), the child reports the conflict as its LimitConflict condition and a
// ChildExceedsParentLimit Event.
func TestRacingCascadingPatchesKeepTheChildServed(t *testing.T) {
	s := theStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := s.Namespace
	group := func(name, parent string, threshold int64) *gatewayv1.Group {
		g := &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		g.Spec.ExternalEntityID = "ext-" + name
		g.Spec.Hierarchy.LimitEnforcement = gatewayv1.EnforcementCascading
		if parent != "" {
			g.Spec.Hierarchy.ParentGroupID = &parent
		}
		g.Spec.Models = []gatewayv1.ModelConfig{{Slug: "demo/echo", RateLimits: []gatewayv1.Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: threshold}}}}
		return g
	}
	served := func(id string) bool {
		n := s.Gateway.View().Namespace(ns)
		return n != nil && n.Groups[id] != nil
	}
	setThreshold := func(name string, threshold int64) error {
		g := &gatewayv1.Group{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, g); err != nil {
			return err
		}
		g.Spec.Models[0].RateLimits[0].Threshold = threshold
		return s.Client.Update(ctx, g)
	}
	bothLanded := 0
	for trial := range 20 {
		parent, child := fmt.Sprintf("race-parent-%d", trial), fmt.Sprintf("race-child-%d", trial)
		for _, g := range []*gatewayv1.Group{group(parent, "", 50), group(child, parent, 30)} {
			if err := s.Client.Create(ctx, g); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 30*time.Second, "the child served", func() bool { return served(child) })

		var wg sync.WaitGroup
		var parentErr, childErr error
		wg.Add(2)
		go func() { defer wg.Done(); parentErr = setThreshold(parent, 35) }()
		go func() { defer wg.Done(); childErr = setThreshold(child, 45) }()
		wg.Wait()

		// Let the manager judge both writes, then the child must still be served.
		waitFor(t, 30*time.Second, "the manager to judge the child", func() bool {
			g := &gatewayv1.Group{}
			return s.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: child}, g) == nil && g.Status.ObservedGeneration == g.Generation &&
				meta.IsStatusConditionTrue(g.Status.Conditions, gatewayv1.ConditionReady)
		})
		if !served(child) {
			t.Fatalf("trial %d: the child left the snapshot (parent write: %v; child write: %v)", trial, parentErr, childErr)
		}
		if parentErr != nil || childErr != nil {
			continue
		}
		bothLanded++
		waitFor(t, 30*time.Second, "the LimitConflict condition and its Event", func() bool {
			g := &gatewayv1.Group{}
			if s.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: child}, g) != nil ||
				!meta.IsStatusConditionTrue(g.Status.Conditions, gatewayv1.ConditionLimitConflict) {
				return false
			}
			var events corev1.EventList
			if s.Client.List(ctx, &events, client.InNamespace(ns)) != nil {
				return false
			}
			for _, e := range events.Items {
				if e.InvolvedObject.Name == child && e.Reason == gatewayv1.ReasonChildExceedsParentLimit {
					return true
				}
			}
			return false
		})
	}
	if bothLanded > 0 {
		t.Errorf("both writes landed in %d of 20 races: the claim on (parent, limit) let a child above its parent", bothLanded)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
