package webhooks_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

var _ = Describe("Endpoint upstream credentials", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	secret := func(name string, labels map[string]string) {
		GinkgoHelper()
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			StringData: map[string]string{"api_key": "sk-" + name}})).To(Succeed())
	}
	endpoint := func(name, secretName string) *gatewayv1.Endpoint {
		return &gatewayv1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gatewayv1.EndpointSpec{
			Slug: "m/" + name, Targets: []gatewayv1.EndpointTarget{{Provider: "OPENAI", BaseURL: "https://api.example.com/v1",
				APIKeySecretRef: &gatewayv1.SecretKeySelector{Name: secretName, Key: "api_key"}}}}}
	}
	const path, rule = "spec.targets[0].apiKeySecretRef.name", "must carry the label " + gatewayv1.LabelUpstreamCredential + "=true"

	It("refuses a Secret that is not labelled as an upstream credential, on create and on update", func() {
		secret("plain", nil)
		expectRefused(k8s.Create(ctx, endpoint("a", "plain")), path, rule)
		secret("marked", map[string]string{gatewayv1.LabelUpstreamCredential: "true"})
		e := endpoint("b", "marked")
		Expect(k8s.Create(ctx, e)).To(Succeed())
		e.Spec.Targets[0].APIKeySecretRef.Name = "plain"
		expectRefused(k8s.Update(ctx, e), path, rule)
	})

	It("refuses a Secret holding key material even when it also carries the upstream label", func() {
		secret("minted", map[string]string{gatewayv1.LabelKeyMaterial: "true", gatewayv1.LabelUpstreamCredential: "true"})
		expectRefused(k8s.Create(ctx, endpoint("a", "minted")), path, rule)
	})

	It("admits a Secret that does not exist yet, as GitOps applies in any order", func() {
		Expect(k8s.Create(ctx, endpoint("a", "later"))).To(Succeed())
	})
})
