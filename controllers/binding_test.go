package controllers_test

import (
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

var _ = Describe("Objects bound to a group that is gone", func() {
	// This suite runs no webhooks: each object carries the binding that admission (webhooks.ParentBinder) would
	// have written when it read the parent, before the parent's deletion began.
	bound := func(obj client.Object, uid string) client.Object {
		obj.SetAnnotations(map[string]string{gatewayv1.AnnotationParentUID: uid})
		return obj
	}
	gone := func(obj client.Object) {
		GinkgoHelper()
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		}, timeout, poll).Should(BeTrue(), "%s should be deleted", obj.GetName())
	}

	It("deletes a child or key that reached etcd after its parent was gone, or was bound to an earlier parent of the same name", func() {
		ns := newNamespace()
		parent := group(ns, "parent", "", gatewayv1.EnforcementIndependent, model("demo/echo"))
		Expect(k8s.Create(ctx, parent)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(slices.Contains(getGroup(ns, "parent")(g).Finalizers, gatewayv1.Finalizer)).To(BeTrue())
		}, timeout, poll).Should(Succeed())
		first := string(parent.UID)
		Expect(k8s.Delete(ctx, parent)).To(Succeed())
		gone(parent)

		By("a child and a key admitted under the first parent, stored after it was gone")
		late := bound(group(ns, "late", "parent", gatewayv1.EnforcementIndependent, model("demo/echo")), first)
		lateKey := bound(hashKey(ns, "late-key", "parent", "mgk_LATELATELATE"), first)
		Expect(k8s.Create(ctx, late)).To(Succeed())
		Expect(k8s.Create(ctx, lateKey)).To(Succeed())
		gone(late)
		gone(lateKey)
		Eventually(func(g Gomega) []string {
			var events corev1.EventList
			g.Expect(k8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			var reasons []string
			for _, e := range events.Items {
				if e.InvolvedObject.Name == "late" {
					reasons = append(reasons, e.Reason+": "+e.Message)
				}
			}
			return reasons
		}, timeout, poll).Should(ContainElement(
			"BoundGroupGone: Group parent, which this Group was created under, is gone; the Group is deleted with it."))

		By("a parent of the same name created again")
		again := group(ns, "parent", "", gatewayv1.EnforcementIndependent, model("demo/echo"))
		Expect(k8s.Create(ctx, again)).To(Succeed())
		stale := bound(group(ns, "stale", "parent", gatewayv1.EnforcementIndependent, model("demo/echo")), first)
		staleKey := bound(hashKey(ns, "stale-key", "parent", "mgk_STALESTALEST"), first)
		fresh := bound(group(ns, "fresh", "parent", gatewayv1.EnforcementIndependent, model("demo/echo")), string(again.UID))
		freshKey := bound(hashKey(ns, "fresh-key", "parent", "mgk_FRESHFRESHFR"), string(again.UID))
		unbound := group(ns, "unbound", "parent", gatewayv1.EnforcementIndependent, model("demo/echo"))
		for _, o := range []client.Object{stale, staleKey, fresh, freshKey, unbound} {
			Expect(k8s.Create(ctx, o)).To(Succeed())
		}
		gone(stale)
		gone(staleKey)
		for _, name := range []string{"fresh", "unbound"} {
			Eventually(func(g Gomega) string {
				return readyReason(getGroup(ns, name)(g).Status.Conditions)
			}, timeout, poll).Should(Equal("True/Ready"), "%s is bound to the parent that exists, or to none", name)
		}
		Eventually(func(g Gomega) string {
			k := &gatewayv1.APIKey{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(freshKey), k)).To(Succeed())
			return readyReason(k.Status.Conditions)
		}, timeout, poll).Should(Equal("True/Ready"))
	})
})
