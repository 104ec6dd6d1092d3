package webhooks_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// chainDeployment is a ChainDeployment of chain with url chainlets of the given names, the first the entrypoint.
func chainDeployment(ns, name, chain string, chainlets ...string) *gatewayv1.ChainDeployment {
	cd := &gatewayv1.ChainDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.ChainDeploymentSpec{ChainID: chain, Entrypoint: chainlets[0]}}
	for _, c := range chainlets {
		cd.Spec.Chainlets = append(cd.Spec.Chainlets, gatewayv1.Chainlet{Name: c,
			Source: gatewayv1.DeploymentSource{URL: "https://chain.example.com/" + c}})
	}
	return cd
}

func chain(ns, name string, envs ...string) *gatewayv1.Chain {
	c := &gatewayv1.Chain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for i := 0; i+1 < len(envs); i += 2 {
		c.Spec.Environments = append(c.Spec.Environments, gatewayv1.ChainEnvironment{Name: envs[i], Deployment: envs[i+1]})
	}
	return c
}

var _ = Describe("Chain webhooks", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("refuses an entrypoint that is not a chainlet", func() {
		cd := chainDeployment(ns, "v1", "pipe", "front", "back")
		cd.Spec.Entrypoint = "middle"
		expectRefused(k8s.Create(ctx, cd), "spec.entrypoint", "entrypoint must name one of spec.chainlets")
	})

	It("refuses duplicate chainlet names", func() {
		cd := chainDeployment(ns, "v1", "pipe", "front", "back", "front")
		expectRefused(k8s.Create(ctx, cd), "spec.chainlets[2]", "Duplicate value")
	})

	It("refuses chainlet names whose deployments would not be valid deployment names", func() {
		cd := chainDeployment(ns, "a-rather-long-chain-deployment-name-for-this", "pipe", "front", "a-rather-long-chainlet-name")
		expectRefused(k8s.Create(ctx, cd), "spec.chainlets[1].name", "runs as ModelDeployment")
	})

	It("refuses an environment, or development, pointing at another chain's deployment, and admits its own", func() {
		Expect(k8s.Create(ctx, chainDeployment(ns, "mine", "pipe", "front"))).To(Succeed())
		Expect(k8s.Create(ctx, chainDeployment(ns, "theirs", "other", "front"))).To(Succeed())
		const rule = "ChainDeployment theirs belongs to chain other; an environment may only point at a deployment of chain pipe"
		expectRefused(k8s.Create(ctx, chain(ns, "pipe", "production", "mine", "staging", "theirs")), "spec.environments[1].deployment", rule)
		c := chain(ns, "pipe", "production", "mine")
		c.Spec.Development = "theirs"
		expectRefused(k8s.Create(ctx, c), "spec.development", rule)
		Expect(k8s.Create(ctx, chain(ns, "pipe", "production", "mine"))).To(Succeed())
	})

	It("refuses an environment, or development, that could name no deployment as invalid", func() {
		const rule = "must name a deployment"
		expectRefused(k8s.Create(ctx, chain(ns, "pipe", "production", "a/b")), "spec.environments[0].deployment", rule)
		c := chain(ns, "pipe", "production", "")
		c.Spec.Development = "../../x"
		expectRefused(k8s.Create(ctx, c), "spec.development", rule)
	})

	It("refuses a Chain without a production environment (CEL)", func() {
		expectRefused(k8s.Create(ctx, chain(ns, "pipe", "staging", "mine")), "spec.environments", "a production environment is required")
	})
})
