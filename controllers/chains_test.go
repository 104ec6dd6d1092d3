package controllers_test

import (
	"encoding/json"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/models"
)

// twoChainlets is a chain deployment whose entrypoint "front" runs as a container, and whose "back" is a url
// source at backURL.
func twoChainlets(ns, name, chain, backURL string) *gatewayv1.ChainDeployment {
	return &gatewayv1.ChainDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.ChainDeploymentSpec{ChainID: chain, Entrypoint: "front", Chainlets: []gatewayv1.Chainlet{
			{Name: "front", Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "registry.example/front:1", Port: 9000,
				Env: []gatewayv1.EnvVar{{Name: "MODE", Value: "fast"}}}}},
			{Name: "back", Source: gatewayv1.DeploymentSource{URL: backURL}},
		}},
	}
}

func chainOf(ns, name string, production string) *gatewayv1.Chain {
	return &gatewayv1.Chain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.ChainSpec{Environments: []gatewayv1.ChainEnvironment{{Name: "production", Deployment: production}}}}
}

func getChainDeployment(ns, name string) func(Gomega) *gatewayv1.ChainDeployment {
	return func(g Gomega) *gatewayv1.ChainDeployment {
		cd := &gatewayv1.ChainDeployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cd)).To(Succeed())
		return cd
	}
}

func chainletURLsEnv(d *appsv1.Deployment) map[string]string {
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == gatewayv1.EnvChainletURLs {
			out := map[string]string{}
			Expect(json.Unmarshal([]byte(e.Value), &out)).To(Succeed())
			return out
		}
	}
	return nil
}

var _ = Describe("Chain reconcilers", func() {
	It("runs one owned ModelDeployment per chainlet, hands each the others' URLs, and reports the worst chainlet status", func() {
		ns := newNamespace()
		back, _ := healthServer()
		Expect(k8s.Create(ctx, chainOf(ns, "pipe", "pipe-v1"))).To(Succeed())
		cd := twoChainlets(ns, "pipe-v1", "pipe", back.URL)
		Expect(k8s.Create(ctx, cd)).To(Succeed())
		frontURL := "http://md-pipe-v1-front." + ns + ".svc:9000"

		By("creating a ModelDeployment for each chainlet, controlled by the ChainDeployment, under the chain's model id")
		for _, name := range []string{"pipe-v1-front", "pipe-v1-back"} {
			Eventually(func(g Gomega) {
				md := getDeployment(ns, name)(g)
				g.Expect(metav1.IsControlledBy(md, getChainDeployment(ns, "pipe-v1")(g))).To(BeTrue())
				g.Expect(md.Spec.ModelID).To(Equal(gatewayv1.ChainletModelID("pipe")))
				g.Expect(md.Labels).To(HaveKeyWithValue(gatewayv1.LabelChain, "pipe"))
			}, timeout, poll).Should(Succeed())
		}

		By("giving the container chainlet MODELGATE_CHAINLET_URLS in its environment, next to its own variables")
		Eventually(func(g Gomega) {
			md := getDeployment(ns, "pipe-v1-front")(g)
			env := md.Spec.Source.Container.Env
			g.Expect(env).To(HaveLen(2))
			g.Expect(env[0]).To(Equal(gatewayv1.EnvVar{Name: "MODE", Value: "fast"}))
			g.Expect(env[1].Name).To(Equal(gatewayv1.EnvChainletURLs))
			g.Expect(env[1].Value).To(MatchJSON(`{"back": "` + back.URL + `"}`))
			g.Expect(chainletURLsEnv(getWorkload(ns, "md-pipe-v1-front")(g))).To(Equal(map[string]string{"back": back.URL}))
		}, timeout, poll).Should(Succeed())

		By("listing each chainlet in the status, the url chainlet with the others' URLs to read")
		Eventually(func(g Gomega) {
			st := getChainDeployment(ns, "pipe-v1")(g).Status
			g.Expect(st.Chainlets).To(HaveLen(2))
			g.Expect(st.Chainlets[0].Name).To(Equal("front"))
			g.Expect(st.Chainlets[0].Deployment).To(Equal("pipe-v1-front"))
			g.Expect(st.Chainlets[0].URL).To(Equal(frontURL))
			g.Expect(st.Chainlets[1].Name).To(Equal("back"))
			g.Expect(st.Chainlets[1].ChainletURLs).To(Equal(map[string]string{"front": frontURL}))
			g.Expect(st.Chainlets[1].Status).To(Equal(gatewayv1.StatusActive))
			g.Expect(st.Chainlets[0].Status).To(Equal(gatewayv1.StatusDeploying))
			g.Expect(st.Status).To(Equal(gatewayv1.StatusDeploying), "the worst of ACTIVE and DEPLOYING")
			g.Expect(st.Environments).To(Equal([]string{"production"}))
		}, timeout, poll).Should(Succeed())

		By("ACTIVE once the entrypoint's pod is ready (written here as the kubelet and Deployment controller would)")
		reportWorkload(ns, "md-pipe-v1-front", 1, 1)
		Eventually(func(g Gomega) gatewayv1.DeploymentStatus {
			return getChainDeployment(ns, "pipe-v1")(g).Status.Status
		}, timeout, poll).Should(Equal(gatewayv1.StatusActive))
		Eventually(func(g Gomega) {
			c := &gatewayv1.Chain{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pipe"}, c)).To(Succeed())
			g.Expect(c.Status.DeploymentsCount).To(BeEquivalentTo(1))
			g.Expect(c.Status.Environments).To(ConsistOf(gatewayv1.EnvironmentStatus{Name: "production", Deployment: "pipe-v1", Status: gatewayv1.StatusActive}))
		}, timeout, poll).Should(Succeed())
	})

	It("keeps a chainlet other than the entrypoint at one replica at least, since nothing wakes it", func() {
		cd := twoChainlets("default", "x", "c", "http://back.example")
		cd.Spec.Entrypoint = "back"
		md := models.DesiredChainletDeployment(cd, cd.Spec.Chainlet("front"))
		Expect(md.Spec.Autoscaling).NotTo(BeNil())
		Expect(md.Spec.Autoscaling.MinReplica).To(HaveValue(BeEquivalentTo(1)))
		Expect(models.DesiredChainletDeployment(cd, cd.Spec.Chainlet("back")).Spec.Autoscaling).To(BeNil(), "a url entrypoint is left alone")
	})

	It("wakes the other chainlets with the entrypoint once a promotion scaled the whole chain deployment down", func() {
		ns := newNamespace()
		cd := twoChainlets(ns, "wake-v1", "wake", "")
		cd.Spec.Chainlets[1].Source = gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "registry.example/back:1", Port: 9001}}
		Expect(k8s.Create(ctx, chainOf(ns, "wake", "wake-v1"))).To(Succeed())
		Expect(k8s.Create(ctx, cd)).To(Succeed())
		front, back := "md-wake-v1-front", "md-wake-v1-back"
		Eventually(func(g Gomega) { getWorkload(ns, front)(g); getWorkload(ns, back)(g) }, timeout, poll).Should(Succeed())
		reportWorkload(ns, front, 1, 1)
		reportWorkload(ns, back, 1, 1)
		Eventually(statusOf(ns, "wake-v1-back"), timeout, poll).Should(Equal(gatewayv1.StatusActive))
		Eventually(statusOf(ns, "wake-v1-front"), timeout, poll).Should(Equal(gatewayv1.StatusActive))

		By("leaving a chainlet that was never scaled down alone when the entrypoint is woken")
		t0 := time.Now().UTC().Add(-time.Minute)
		annotate := func(name, key string, at time.Time) {
			patchDeployment(ns, name, `{"metadata":{"annotations":{"`+key+`":"`+at.Format(time.RFC3339)+`"}}}`)
		}
		annotate("wake-v1-front", gatewayv1.AnnotationWakeRequestedAt, t0)
		Consistently(func(g Gomega) map[string]string { return getDeployment(ns, "wake-v1-back")(g).Annotations }, 2*time.Second, poll).
			ShouldNot(HaveKey(gatewayv1.AnnotationWakeRequestedAt))

		By("scaling both chainlets to zero, as promote does to the previous deployment")
		down := t0.Add(10 * time.Second)
		annotate("wake-v1-front", gatewayv1.AnnotationScaledDownAt, down)
		annotate("wake-v1-back", gatewayv1.AnnotationScaledDownAt, down)
		Eventually(replicasOf(ns, front), timeout, poll).Should(BeEquivalentTo(0))
		Eventually(replicasOf(ns, back), timeout, poll).Should(BeEquivalentTo(0), "the floor of one replica does not hold a deployment promote scaled down")
		reportWorkload(ns, front, 0, 0)
		reportWorkload(ns, back, 0, 0)

		By("waking the entrypoint, as gatewayd does for a call held for it, wakes the other chainlet too")
		wake := down.Add(10 * time.Second)
		annotate("wake-v1-front", gatewayv1.AnnotationWakeRequestedAt, wake)
		Eventually(replicasOf(ns, front), timeout, poll).Should(BeEquivalentTo(1))
		Eventually(replicasOf(ns, back), timeout, poll).Should(BeEquivalentTo(1))
		Expect(getDeployment(ns, "wake-v1-back")(Default).Annotations).To(HaveKeyWithValue(gatewayv1.AnnotationWakeRequestedAt, wake.Format(time.RFC3339)))
		Eventually(statusOf(ns, "wake-v1-back"), timeout, poll).Should(Equal(gatewayv1.StatusWakingUp))

		By("a chainlet scaled down after that wake stays down")
		annotate("wake-v1-back", gatewayv1.AnnotationScaledDownAt, wake.Add(10*time.Second))
		Eventually(replicasOf(ns, back), timeout, poll).Should(BeEquivalentTo(0))
		Consistently(replicasOf(ns, back), 2*time.Second, poll).Should(BeEquivalentTo(0))
	})

	It("publishes the chain, and on deletion drops it from the next snapshot and removes every chainlet deployment", func() {
		ns := newNamespace()
		back, _ := healthServer()
		Expect(k8s.Create(ctx, chainOf(ns, "gone", "gone-v1"))).To(Succeed())
		Expect(k8s.Create(ctx, twoChainlets(ns, "gone-v1", "gone", back.URL))).To(Succeed())
		Expect(k8s.Create(ctx, twoChainlets(ns, "gone-v2", "gone", back.URL))).To(Succeed())

		var before int64
		Eventually(func(g Gomega) {
			s, v, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Chains).To(ConsistOf(HaveField("ID", "gone")))
			g.Expect(s.ChainDeployments).To(ConsistOf(
				snapshot.ChainDeployment{ID: "gone-v1", ChainID: "gone", Entrypoint: "gone-v1-front"},
				snapshot.ChainDeployment{ID: "gone-v2", ChainID: "gone", Entrypoint: "gone-v2-front"}))
			g.Expect(slices.ContainsFunc(s.Deployments, func(d snapshot.Deployment) bool { return d.ID == "gone-v1-back" })).To(BeTrue())
			before = v
		}, timeout, poll).Should(Succeed())
		Eventually(func(g Gomega) []string {
			c := &gatewayv1.Chain{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone"}, c)).To(Succeed())
			return c.Finalizers
		}, timeout, poll).Should(ContainElement(gatewayv1.ChainFinalizer))

		Expect(k8s.Delete(ctx, &gatewayv1.Chain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}})).To(Succeed())

		By("leaving the snapshot in the next version")
		Eventually(func(g Gomega) {
			s, v, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(BeNumerically(">", before))
			g.Expect(s.Chains).To(BeEmpty())
			g.Expect(s.ChainDeployments).To(BeEmpty())
		}, timeout, poll).Should(Succeed())

		By("removing both chain deployments, all four chainlet deployments and the container workloads (no garbage collector here)")
		for _, name := range []string{"gone-v1-front", "gone-v1-back", "gone-v2-front", "gone-v2-back"} {
			Eventually(isNotFound(&gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}), timeout, poll).Should(BeTrue(), name)
		}
		for _, name := range []string{"md-gone-v1-front", "md-gone-v2-front"} {
			Eventually(isNotFound(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}), timeout, poll).Should(BeTrue(), name)
		}
		for _, name := range []string{"gone-v1", "gone-v2"} {
			Eventually(isNotFound(&gatewayv1.ChainDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}), timeout, poll).Should(BeTrue(), name)
		}
		Eventually(isNotFound(&gatewayv1.Chain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}}), timeout, poll).Should(BeTrue())
	})
})
