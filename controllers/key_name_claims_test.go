package controllers_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// This suite runs no webhooks: each spec writes a key's name claim as the admission webhook writes it.
var _ = Describe("Key name claims", func() {
	// nameClaim writes the claim of value held by holder (name, uid), taken at claimedAt.
	nameClaim := func(ns, value, holder, uid string, claimedAt time.Time) *corev1.ConfigMap {
		GinkgoHelper()
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.ClaimName(gatewayv1.ClaimKindKeyName, value),
				Labels: map[string]string{gatewayv1.LabelClaim: gatewayv1.ClaimKindKeyName}},
			Data: map[string]string{gatewayv1.ClaimDataValue: value, gatewayv1.ClaimDataHolderKind: "WorkspaceAPIKey",
				gatewayv1.ClaimDataHolderName: holder, gatewayv1.ClaimDataHolderUID: uid,
				gatewayv1.ClaimDataClaimedAt: claimedAt.UTC().Format(time.RFC3339Nano)},
		}
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		return cm
	}
	named := func(ns, name, displayName string) *gatewayv1.WorkspaceAPIKey {
		GinkgoHelper()
		k := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAll, DisplayName: displayName}}
		Expect(k8s.Create(ctx, k)).To(Succeed())
		return k
	}
	rename := func(k *gatewayv1.WorkspaceAPIKey, displayName string) {
		GinkgoHelper()
		base := k.DeepCopy()
		k.Spec.DisplayName = displayName
		Expect(k8s.Patch(ctx, k, client.MergeFrom(base))).To(Succeed())
	}
	gone := func(cm *corev1.ConfigMap) func() bool {
		return func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}))
		}
	}
	exists := func(cm *corev1.ConfigMap) func() error {
		return func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}) }
	}
	past := time.Now().Add(-time.Minute)

	It("deletes the claim of a deleted or renamed key's name, and keeps one a key or an admission in flight holds", func() {
		ns := newNamespace()
		renamed := named(ns, "renamed", "alpha")
		alpha := nameClaim(ns, renamed.NameClaim(), renamed.Name, string(renamed.UID), past)
		deleted := named(ns, "deleted", "beta")
		beta := nameClaim(ns, deleted.NameClaim(), deleted.Name, string(deleted.UID), past)
		// A key deleted while another create, still in admission, has just taken its name over.
		taken := named(ns, "taken", "gamma")
		gamma := nameClaim(ns, taken.NameClaim(), "creating", "uid-of-a-key-not-stored-yet", time.Now())

		By("a rename frees the old name; the new name's claim is the key's")
		rename(renamed, "alpha-2")
		alpha2 := nameClaim(ns, renamed.NameClaim(), renamed.Name, string(renamed.UID), past)
		Eventually(gone(alpha), timeout, poll).Should(BeTrue(), "the claim of the name a key left")

		By("a deletion frees the key's name")
		Expect(k8s.Delete(ctx, taken)).To(Succeed())
		Expect(k8s.Delete(ctx, deleted)).To(Succeed())
		Eventually(gone(beta), timeout, poll).Should(BeTrue(), "the claim of a deleted key's name")

		By("a claim taken by an admission in flight stays through its grace, and a held one stays")
		Consistently(exists(gamma), 2*time.Second, poll).Should(Succeed())
		Expect(exists(alpha2)()).To(Succeed())

		By("a rename frees the renamed key's newer name too")
		rename(renamed, "alpha-3")
		Eventually(gone(alpha2), timeout, poll).Should(BeTrue())
	})
})
