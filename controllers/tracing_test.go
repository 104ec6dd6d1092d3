package controllers_test

import (
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

var _ = Describe("Reconcile spans", func() {
	// docs/operations.md "Traces": the reconciles of Groups, Endpoints and ModelDeployments are spans, read back
	// here from a real Jaeger.
	It("gives each reconcile of a Group, an Endpoint and a ModelDeployment a span naming the object", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "traced", "", gatewayv1.EnforcementCascading, model("demo/echo")))).To(Succeed())
		Expect(k8s.Create(ctx, &gatewayv1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "traced-echo"},
			Spec: gatewayv1.EndpointSpec{Slug: "demo/echo", Targets: []gatewayv1.EndpointTarget{
				{Provider: gatewayv1.ProviderOpenAI, BaseURL: "http://127.0.0.1:9999/v1"}}}})).To(Succeed())
		Expect(k8s.Create(ctx, urlDeployment(ns, "traced-v1", "traced", "http://127.0.0.1:1"))).To(Succeed())
		Eventually(func(g Gomega) []string {
			g.Expect(tracer.Flush(ctx)).To(Succeed())
			traces, err := jaeger.Traces(managerService, 1000)
			g.Expect(err).NotTo(HaveOccurred())
			var seen []string
			for _, tc := range traces {
				for _, s := range tc.Spans {
					if s.Tag("k8s.namespace.name") != ns {
						continue
					}
					g.Expect(s.Tag("span.kind")).To(Equal("internal"))
					g.Expect(s.Tag("modelgate.reconcile_id")).NotTo(BeEmpty())
					g.Expect(s.HasTag("modelgate.requeue")).To(BeTrue())
					seen = append(seen, s.OperationName+" "+s.Tag("modelgate.object.name"))
				}
			}
			slices.Sort(seen)
			return slices.Compact(seen)
		}, timeout, poll).Should(ContainElements("reconcile Group traced", "reconcile Endpoint traced-echo",
			"reconcile ModelDeployment traced-v1"))
	})
})
