package webhooks_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

var _ = Describe("Children of a group being deleted", func() {
	It("are refused, naming the parent field, while a missing parent is still admitted", func() {
		ns := newNamespace()
		parent := group(ns, "leaving", "", gatewayv1.EnforcementIndependent)
		parent.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, parent)).To(Succeed())
		Expect(k8s.Delete(ctx, parent)).To(Succeed())
		expectRefused(k8s.Create(ctx, group(ns, "late-child", "leaving", gatewayv1.EnforcementIndependent)),
			"spec.hierarchy.parentGroupID", "parent group leaving is being deleted")
		Expect(k8s.Create(ctx, group(ns, "early-child", "not-yet", gatewayv1.EnforcementIndependent))).To(Succeed())

		letGo(parent)
	})
})
