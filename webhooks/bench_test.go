package webhooks_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/webhooks"
)

// BenchmarkLowerWideGroup is the admission check of lowering a CASCADING root's limit when the root has 300
// children (each declaring a lower limit, with two grandchildren of their own) in a workspace of 3,900 groups,
// reading a real API server as the webhook does. lists/op is the field-selector reads per check.
//
//	KUBEBUILDER_ASSETS=$HOME/.cache/modelgate/envtest/v1.37.1 go test ./webhooks/ -run '^$' -bench LowerWideGroup -benchtime 20x
func BenchmarkLowerWideGroup(b *testing.B) {
	logf.SetLogger(logr.Discard())
	env, err := kubetest.Start(kubetest.Options{CRDs: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	ns, err := kubetest.NewNamespace(ctx, env.Client, "bench-")
	if err != nil {
		b.Fatal(err)
	}
	limit := requestsPerMinute
	// Straight to the API server: no webhook is installed, the tree is valid by construction.
	create := func(name, parent string, mode gatewayv1.LimitEnforcement, m gatewayv1.ModelConfig) error {
		return env.Client.Create(ctx, group(ns, name, parent, mode, m))
	}
	root := group(ns, "root", "", cascade, limit(100))
	if err := env.Client.Create(ctx, root); err != nil {
		b.Fatal(err)
	}
	var eg errgroup.Group
	eg.SetLimit(16)
	for i := range 300 {
		eg.Go(func() error {
			child := fmt.Sprintf("c%d", i)
			if err := create(child, "root", cascade, limit(50)); err != nil {
				return err
			}
			for j := range 2 {
				if err := create(fmt.Sprintf("%s-%d", child, j), child, cascade, limit(40)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for i := range 3000 {
		eg.Go(func() error { return create(fmt.Sprintf("other-%d", i), "", indep, gatewayv1.ModelConfig{Slug: "m"}) })
	}
	if err := eg.Wait(); err != nil {
		b.Fatal(err)
	}

	reads := &countingReader{Reader: env.Client}
	v := &webhooks.GroupValidator{Reader: reads}
	lowered := root.DeepCopy()
	for i := 0; b.Loop(); i++ {
		lowered.Spec.Models[0].RateLimits[0].Threshold = 60 + int64(i%40)
		if _, err := v.ValidateUpdate(ctx, root, lowered); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(reads.lists.Load())/float64(b.N), "lists/op")
}
