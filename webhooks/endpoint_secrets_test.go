package webhooks_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// listing is an upstream credential Secret that lists the hosts it may be sent to.
	listing := func(name, hosts string) {
		GinkgoHelper()
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{gatewayv1.LabelUpstreamCredential: "true"},
			Annotations: map[string]string{gatewayv1.AnnotationUpstreamHosts: hosts}},
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
		listing("marked", "api.example.com")
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

	Describe("bound to the hosts the Secret lists", func() {
		const hostsRule = "may be sent only to the hosts its annotation " + gatewayv1.AnnotationUpstreamHosts + " lists"
		at := func(e *gatewayv1.Endpoint, base string) *gatewayv1.Endpoint {
			e.Spec.Targets[0].BaseURL = base
			return e
		}

		It("refuses a baseURL whose host the Secret does not list, on create and on update, naming the field and the rule", func() {
			listing("openai", "api.example.com, *.azure.example.net, 10.0.0.7:8443")
			for i, base := range []string{"https://api.example.com/v1", "https://API.example.com:8443/v1", "https://eu.azure.example.net/v1", "http://10.0.0.7:8443/v1"} {
				Expect(k8s.Create(ctx, at(endpoint(fmt.Sprintf("ok-%d", i), "openai"), base))).To(Succeed(), base)
			}
			for _, base := range []string{"https://attacker.example.org/v1", "https://api.example.com.attacker.org/v1", "https://azure.example.net/v1", "http://10.0.0.7:9000/v1"} {
				expectRefused(k8s.Create(ctx, at(endpoint("bad", "openai"), base)), "spec.targets[0].baseURL", hostsRule)
			}
			e := endpoint("moved", "openai")
			Expect(k8s.Create(ctx, e)).To(Succeed())
			expectRefused(k8s.Update(ctx, at(e, "https://attacker.example.org/v1")), "spec.targets[0].baseURL", hostsRule)
		})

		It("keeps the Endpoints of a Secret that lists no hosts, but points no target at it anew", func() {
			const legacyRule = "lists no hosts"
			e := endpoint("old", "legacy")
			Expect(k8s.Create(ctx, e)).To(Succeed()) // before the Secret: GitOps order
			secret("legacy", map[string]string{gatewayv1.LabelUpstreamCredential: "true"})
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
			e.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Second}
			Expect(k8s.Update(ctx, e)).To(Succeed(), "an unrelated change of an existing Endpoint")
			expectRefused(k8s.Update(ctx, at(e, "https://attacker.example.org/v1")), "spec.targets[0].apiKeySecretRef.name", legacyRule)
			expectRefused(k8s.Create(ctx, endpoint("new", "legacy")), "spec.targets[0].apiKeySecretRef.name", legacyRule)
		})

		It("checks every target of an Endpoint, not only the first", func() {
			listing("openai", "api.example.com")
			e := endpoint("two", "openai")
			second := *e.Spec.Targets[0].DeepCopy()
			second.Name, second.BaseURL = "second", "https://attacker.example.org/v1"
			e.Spec.Targets = append(e.Spec.Targets, second)
			expectRefused(k8s.Create(ctx, e), "spec.targets[1].baseURL", hostsRule)
		})

		It("keeps a target of a Secret that lists no hosts when the update moves it in the list", func() {
			const legacyRule = "lists no hosts"
			e := endpoint("moving", "legacy")
			Expect(k8s.Create(ctx, e)).To(Succeed())
			secret("legacy", map[string]string{gatewayv1.LabelUpstreamCredential: "true"})
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
			kept := e.Spec.Targets[0]
			kept.Name, kept.Weight = "kept", 3
			e.Spec.Targets = []gatewayv1.EndpointTarget{{Provider: "OPENAI", BaseURL: "http://127.0.0.1:9999/v1"}, kept}
			Expect(k8s.Update(ctx, e)).To(Succeed(), "the legacy target moved to index 1, its baseURL and Secret unchanged")
			e.Spec.Targets[1].BaseURL = "https://attacker.example.org/v1"
			expectRefused(k8s.Update(ctx, e), "spec.targets[1].apiKeySecretRef.name", legacyRule)
		})
	})
})
