package webhooks_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/webhooks"
)

var (
	k8s client.Client
	ctx context.Context
)

func TestWebhooks(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhooks Suite")
}

var _ = BeforeSuite(func() {
	env := kubetest.StartSuite(kubetest.Options{CRDs: true, Webhooks: true})
	k8s = env.Client
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)
	env.RunManager(ctx, webhooks.SetupWithManager)
	// The API server calls the webhook over TLS; wait until it answers before the first write.
	Eventually(env.ProbeWebhook).Should(Succeed())
})

// newNamespace gives each spec its own workspace, so that uniqueness rules of one spec do not see another's objects.
func newNamespace() string {
	GinkgoHelper()
	ns, err := kubetest.NewNamespace(ctx, k8s, "ws-")
	Expect(err).NotTo(HaveOccurred())
	return ns
}

// expectRefused asserts a refusal by admission: Invalid or Forbidden, naming the field path and the rule.
func expectRefused(err error, path, rule string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "write was admitted, want a refusal at %s", path)
	Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "want Invalid or Forbidden, got %v", err)
	Expect(err.Error()).To(ContainSubstring(path))
	Expect(err.Error()).To(ContainSubstring(rule))
}

// letGo removes the finalizers of obj, which is being deleted, so that the API server deletes it.
func letGo(obj client.Object) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	obj.SetFinalizers(nil)
	Expect(k8s.Update(ctx, obj)).To(Succeed())
}

func str(s string) *string { return &s }

func group(ns, name, parent string, mode gatewayv1.LimitEnforcement, models ...gatewayv1.ModelConfig) *gatewayv1.Group {
	g := &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	g.Spec.ExternalEntityID = "ext-" + name
	g.Spec.Hierarchy.LimitEnforcement = mode
	if parent != "" {
		g.Spec.Hierarchy.ParentGroupID = str(parent)
	}
	if len(models) == 0 {
		models = []gatewayv1.ModelConfig{{Slug: "demo/echo"}}
	}
	g.Spec.Models = models
	return g
}

func rateModel(slug string, typ gatewayv1.LimitType, threshold int64) gatewayv1.ModelConfig {
	return gatewayv1.ModelConfig{Slug: slug, RateLimits: []gatewayv1.Limit{{Type: typ, Unit: gatewayv1.UnitMinute, Threshold: threshold}}}
}

// requestsPerMinute is model m with one REQUEST limit per MINUTE.
func requestsPerMinute(threshold int64) gatewayv1.ModelConfig {
	return rateModel("m", gatewayv1.LimitTypeRequest, threshold)
}

// hash64 is a well-formed hash; the webhooks never look at it, only CEL checks its shape.
func hash64(i int) string { return fmt.Sprintf("%064x", i) }
