package webhooks_test

import (
	"fmt"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
)

// setThreshold writes g's first limit at threshold, as a client that read it just before does.
func setThreshold(ns, name string, threshold int64) error {
	g := &gatewayv1.Group{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, g); err != nil {
		return err
	}
	g.Spec.Models[0].RateLimits[0].Threshold = threshold
	return k8s.Update(ctx, g)
}

// thresholdOf is g's first limit as stored.
func thresholdOf(ns, name string) int64 {
	GinkgoHelper()
	g := &gatewayv1.Group{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, g)).To(Succeed())
	return g.Spec.Models[0].RateLimits[0].Threshold
}

// together runs the writes at once, released by one signal, and returns their errors.
func together(writes ...func() error) []error {
	errs := make([]error, len(writes))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = w()
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

var _ = Describe("The claim on (parent, limit)", func() {
	const threshold = "spec.models[0].rateLimits[0].threshold"

	It("never stores a child above its parent from two concurrent writes, in each of 30 races", func() {
		ns := newNamespace()
		for trial := range 30 {
			parent, child := fmt.Sprintf("p-%d", trial), fmt.Sprintf("c-%d", trial)
			Expect(k8s.Create(ctx, group(ns, parent, "", cascade, requestsPerMinute(50)))).To(Succeed())
			Expect(k8s.Create(ctx, group(ns, child, parent, cascade, requestsPerMinute(30)))).To(Succeed())
			// Alone, each write is valid: the parent lowered to 35 is above the child's 30, the child raised to 45
			// below the parent's 50. Together they would store the child above its parent.
			errs := together(func() error { return setThreshold(ns, parent, 35) }, func() error { return setThreshold(ns, child, 45) })
			Expect(errs[0] != nil || errs[1] != nil).To(BeTrue(),
				"race %d: both writes were admitted; the child declares %d under a parent of %d", trial, thresholdOf(ns, child), thresholdOf(ns, parent))
			Expect(errs[0] == nil || errs[1] == nil).To(BeTrue(), "race %d: both writes were refused: %v", trial, errs)
			for _, err := range errs {
				if err != nil {
					expectRefused(err, threshold, hierarchy.MsgChildExceedsParent)
				}
			}
			Expect(thresholdOf(ns, child)).To(BeNumerically("<=", thresholdOf(ns, parent)), "race %d", trial)
		}
	})

	It("closes the race with a grandparent too, and with a child created under a parent being lowered", func() {
		ns := newNamespace()
		for trial := range 10 {
			root, mid, leaf := fmt.Sprintf("r-%d", trial), fmt.Sprintf("m-%d", trial), fmt.Sprintf("l-%d", trial)
			Expect(k8s.Create(ctx, group(ns, root, "", cascade, requestsPerMinute(50)))).To(Succeed())
			// mid declares no limit on m, so leaf answers to root directly.
			Expect(k8s.Create(ctx, group(ns, mid, root, cascade, gatewayv1.ModelConfig{Slug: "m"}))).To(Succeed())
			errs := together(func() error { return setThreshold(ns, root, 20) },
				func() error { return k8s.Create(ctx, group(ns, leaf, mid, cascade, requestsPerMinute(40))) })
			Expect(errs[0] == nil && errs[1] == nil).To(BeFalse(), "race %d: a leaf of 40 was created under a root lowered to 20", trial)
			for _, err := range errs {
				if err != nil {
					expectRefused(err, threshold, hierarchy.MsgChildExceedsParent)
				}
			}
		}
	})

	It("admits 20 concurrent children of one parent, each under it", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "parent", "", cascade, requestsPerMinute(50)))).To(Succeed())
		writes := make([]func() error, 20)
		for i := range writes {
			writes[i] = func() error {
				return k8s.Create(ctx, group(ns, fmt.Sprintf("child-%d", i), "parent", cascade, requestsPerMinute(int64(10+i))))
			}
		}
		for i, err := range together(writes...) {
			Expect(err).NotTo(HaveOccurred(), "child %d", i)
		}
	})

	It("keeps one claim per group that declares limits, deleted with the group", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "parent", "", cascade, requestsPerMinute(50)))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "child", "parent", cascade, requestsPerMinute(10)))).To(Succeed())
		for range 5 {
			Expect(setThreshold(ns, "child", 20)).To(Succeed())
			Expect(setThreshold(ns, "child", 10)).To(Succeed())
		}
		var claims corev1.ConfigMapList
		Expect(k8s.List(ctx, &claims, client.InNamespace(ns), client.MatchingLabels{gatewayv1.LabelClaim: "limits"})).To(Succeed())
		Expect(claims.Items).To(HaveLen(2), "one limit claim per group")
		g := &gatewayv1.Group{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "child"}, g)).To(Succeed())
		g.Finalizers = []string{"test.modelgate.io/hold"}
		Expect(k8s.Update(ctx, g)).To(Succeed())
		Expect(k8s.Delete(ctx, g)).To(Succeed())
		letGo(g)
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: gatewayv1.ClaimName("limits", "child")}, &corev1.ConfigMap{})).
			NotTo(Succeed(), "the deleted group's limit claim is still there")
	})
})
