package webhooks_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

var _ = Describe("Revocation records", func() {
	It("keep 60 revoked keys in at most 16 ConfigMaps, and refuse every revoked prefix", func() {
		ns := newNamespace()
		claimMaps := func() int {
			var list corev1.ConfigMapList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns), client.HasLabels{gatewayv1.LabelClaim})).To(Succeed())
			return len(list.Items)
		}
		key := func(name string, i int) *gatewayv1.APIKey {
			k := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			k.Spec.GroupID = "acme"
			k.Spec.Prefix = fmt.Sprintf("mgk_%012d", i)
			k.Spec.Hash = hash64(i)
			return k
		}
		const n = 60
		for i := range n {
			Expect(k8s.Create(ctx, key(fmt.Sprintf("k-%d", i), i))).To(Succeed())
		}
		Expect(claimMaps()).To(Equal(n), "one prefix claim per live key")
		for i := range n {
			Expect(k8s.Delete(ctx, key(fmt.Sprintf("k-%d", i), i))).To(Succeed())
		}
		Expect(claimMaps()).To(BeNumerically("<=", gatewayv1.RevokedShards),
			"revoking %d keys left %d ConfigMaps; the records must not grow with the keys revoked", n, claimMaps())
		for i := range n {
			expectRefused(k8s.Create(ctx, key(fmt.Sprintf("again-%d", i), i)), "spec.prefix", "was revoked")
		}
		Expect(claimMaps()).To(BeNumerically("<=", gatewayv1.RevokedShards), "refused creates leave no claim behind")
	})
})
