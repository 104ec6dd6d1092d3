package webhooks_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

var _ = Describe("Binding to the group an object is created under", func() {
	bindingOf := func(obj client.Object) string {
		GinkgoHelper()
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		return obj.GetAnnotations()[gatewayv1.AnnotationParentUID]
	}

	It("records the parent's UID on create, replacing a copied one, and drops one whose parent does not exist yet", func() {
		ns := newNamespace()
		parent := group(ns, "parent", "", gatewayv1.EnforcementIndependent)
		Expect(k8s.Create(ctx, parent)).To(Succeed())
		Expect(parent.UID).NotTo(BeEmpty())

		child := group(ns, "child", "parent", gatewayv1.EnforcementIndependent)
		child.Annotations = map[string]string{gatewayv1.AnnotationParentUID: "copied-from-another-cluster"}
		Expect(k8s.Create(ctx, child)).To(Succeed())
		Expect(bindingOf(child)).To(Equal(string(parent.UID)))

		early := group(ns, "early", "not-yet", gatewayv1.EnforcementIndependent)
		early.Annotations = map[string]string{gatewayv1.AnnotationParentUID: "copied-from-another-cluster", "team": "a"}
		Expect(k8s.Create(ctx, early)).To(Succeed())
		Expect(early.Annotations).NotTo(HaveKey(gatewayv1.AnnotationParentUID))
		Expect(early.Annotations).To(HaveKeyWithValue("team", "a"), "other annotations are left alone")

		root := group(ns, "root", "", gatewayv1.EnforcementIndependent)
		root.Annotations = map[string]string{gatewayv1.AnnotationParentUID: "copied"}
		Expect(k8s.Create(ctx, root)).To(Succeed())
		Expect(bindingOf(root)).To(BeEmpty(), "a root group is bound to nothing")

		key := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "key"}}
		key.Spec.GroupID = "parent"
		key.Spec.Prefix = "mgk_BINDBINDBIND"
		key.Spec.Hash = hash64(1)
		Expect(k8s.Create(ctx, key)).To(Succeed())
		Expect(bindingOf(key)).To(Equal(string(parent.UID)))
	})

	It("keeps the binding through every update, whatever the update says", func() {
		ns := newNamespace()
		parent := group(ns, "parent", "", gatewayv1.EnforcementIndependent)
		Expect(k8s.Create(ctx, parent)).To(Succeed())
		child := group(ns, "child", "parent", gatewayv1.EnforcementIndependent)
		Expect(k8s.Create(ctx, child)).To(Succeed())

		child.Annotations[gatewayv1.AnnotationParentUID] = "forged"
		child.Spec.DisplayName = "renamed"
		Expect(k8s.Update(ctx, child)).To(Succeed())
		Expect(bindingOf(child)).To(Equal(string(parent.UID)))
		Expect(child.Spec.DisplayName).To(Equal("renamed"), "the rest of the update is applied")

		delete(child.Annotations, gatewayv1.AnnotationParentUID)
		Expect(k8s.Update(ctx, child)).To(Succeed())
		Expect(bindingOf(child)).To(Equal(string(parent.UID)), "an apply that does not list the annotation cannot drop it")

		// A group admitted before its parent existed stays unbound: its parent's finalizer finds it in the cache.
		early := group(ns, "early", "later", gatewayv1.EnforcementIndependent)
		Expect(k8s.Create(ctx, early)).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "later", "", gatewayv1.EnforcementIndependent))).To(Succeed())
		early.Annotations = map[string]string{gatewayv1.AnnotationParentUID: "forged"}
		Expect(k8s.Update(ctx, early)).To(Succeed())
		Expect(bindingOf(early)).To(BeEmpty())
	})
})
