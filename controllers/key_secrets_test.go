package controllers_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/apikey"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

var _ = Describe("Key Secrets and upstream credentials", func() {
	It("labels the Secrets it mints as key material, and refuses a key kept in an upstream credential", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "acme", "", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())

		minted := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "minted"}, Spec: gatewayv1.APIKeySpec{GroupID: "acme"}}
		Expect(k8s.Create(ctx, minted)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(minted), minted)).To(Succeed())
			g.Expect(minted.Status.SecretName).NotTo(BeEmpty())
			var s corev1.Secret
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: minted.Status.SecretName}, &s)).To(Succeed())
			g.Expect(s.Labels).To(HaveKeyWithValue(gatewayv1.LabelKeyMaterial, "true"))
		}, timeout, poll).Should(Succeed())

		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared",
			Labels: map[string]string{gatewayv1.LabelUpstreamCredential: "true"}},
			Data: map[string][]byte{"api_key": []byte("byok" + randomAlnum(40))}})).To(Succeed())
		byok := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "byok"}, Spec: gatewayv1.APIKeySpec{GroupID: "acme",
			KeySource: gatewayv1.KeySource{SecretRef: &gatewayv1.SecretKeySelector{Name: "shared"}}}}
		Expect(k8s.Create(ctx, byok)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(byok), byok)).To(Succeed())
			g.Expect(readyReason(byok.Status.Conditions)).To(Equal("False/" + gatewayv1.ReasonSecretInvalid))
			g.Expect(byok.Status.Hash).To(BeEmpty())
		}, timeout, poll).Should(Succeed())
	})

	It("refuses to serve a Secret's key whose prefix was revoked, whatever the source (docs/security.md)", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "acme", "", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		plain := "mgk_" + randomAlnum(40)
		prefix := apikey.Prefix(plain)
		// The tombstone the webhooks leave when a REST key with this prefix is deleted (this suite runs no webhooks).
		Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.ClaimName(gatewayv1.ClaimKindKeyPrefix, prefix),
			Labels: map[string]string{gatewayv1.LabelClaim: gatewayv1.ClaimKindKeyPrefix}},
			Data: map[string]string{"value": prefix, gatewayv1.ClaimDataRevoked: "true", gatewayv1.ClaimDataHash: apikey.Hash(plain)}})).To(Succeed())

		for _, k := range []client.Object{
			&gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "revived"}, Spec: gatewayv1.APIKeySpec{GroupID: "acme",
				KeySource: gatewayv1.KeySource{SecretRef: &gatewayv1.SecretKeySelector{Name: "revived"}}}},
			&gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "revived"}, Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeInvoke,
				KeySource: gatewayv1.KeySource{SecretRef: &gatewayv1.SecretKeySelector{Name: "revived"}}}},
		} {
			Expect(k8s.Create(ctx, k)).To(Succeed())
		}
		By("a Secret written after the keys were admitted")
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "revived"},
			Data: map[string][]byte{"api_key": []byte(plain)}})).To(Succeed())
		Eventually(func(g Gomega) {
			var fed gatewayv1.APIKey
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "revived"}, &fed)).To(Succeed())
			g.Expect(readyReason(fed.Status.Conditions)).To(Equal("False/" + gatewayv1.ReasonPrefixRevoked))
			g.Expect(fed.Status.Prefix).To(BeEmpty())
			g.Expect(fed.Status.Hash).To(BeEmpty())
			var ws gatewayv1.WorkspaceAPIKey
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "revived"}, &ws)).To(Succeed())
			g.Expect(readyReason(ws.Status.Conditions)).To(Equal("False/" + gatewayv1.ReasonPrefixRevoked))
			g.Expect(ws.Status.Hash).To(BeEmpty())
		}, timeout, poll).Should(Succeed())
		// The published snapshot carries neither key.
		Eventually(func(g Gomega) {
			s, _, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Groups).NotTo(BeEmpty(), "the group is served")
			g.Expect(s.APIKeys).To(BeEmpty())
			g.Expect(s.WorkspaceAPIKeys).To(BeEmpty())
			g.Expect(s.WorkspaceAPIKeys).To(BeEmpty())
		}, timeout, poll).Should(Succeed())
	})
})
