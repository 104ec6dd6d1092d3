package webhooks_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// model is a Model whose environments are given as name, deployment pairs.
func model(ns, name string, envs ...string) *gatewayv1.Model {
	m := &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for i := 0; i+1 < len(envs); i += 2 {
		m.Spec.Environments = append(m.Spec.Environments, gatewayv1.ModelEnvironment{Name: envs[i], Deployment: envs[i+1]})
	}
	return m
}

// deployment is a ModelDeployment of modelID served from outside the cluster: no controller runs here.
func deployment(ns, name, modelID string) *gatewayv1.ModelDeployment {
	md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	md.Spec.ModelID = modelID
	md.Spec.Source.URL = "https://models.example.com/" + name
	return md
}

// release removes holdFinalizer from obj, so the namespace's objects can go.
func release(obj client.Object) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	obj.SetFinalizers(nil)
	Expect(k8s.Update(ctx, obj)).To(Succeed())
}

const otherModelsDeployment = "belongs to model other; an environment may only point at a deployment of model m"

var _ = Describe("Model webhook", func() {
	var ns string
	BeforeEach(func() {
		ns = newNamespace()
		Expect(k8s.Create(ctx, deployment(ns, "mine", "m"))).To(Succeed())
		Expect(k8s.Create(ctx, deployment(ns, "theirs", "other"))).To(Succeed())
	})

	It("refuses an environment pointing at another model's deployment, naming the environment's index", func() {
		expectRefused(k8s.Create(ctx, model(ns, "m", "production", "mine", "staging", "theirs")),
			"spec.environments[1].deployment", "ModelDeployment theirs "+otherModelsDeployment)
		expectRefused(k8s.Create(ctx, model(ns, "m", "production", "theirs")),
			"spec.environments[0].deployment", otherModelsDeployment)
	})

	It("refuses spec.development pointing at another model's deployment", func() {
		m := model(ns, "m", "production", "mine")
		m.Spec.Development = "theirs"
		expectRefused(k8s.Create(ctx, m), "spec.development", otherModelsDeployment)
	})

	It("refuses a promotion to another model's deployment, by Update and by Patch", func() {
		m := model(ns, "m", "production", "mine")
		Expect(k8s.Create(ctx, m)).To(Succeed())

		promoted := m.DeepCopy()
		promoted.Spec.Environments[0].Deployment = "theirs"
		expectRefused(k8s.Update(ctx, promoted), "spec.environments[0].deployment", otherModelsDeployment)

		patch := client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"development":"theirs"}}`))
		expectRefused(k8s.Patch(ctx, m.DeepCopy(), patch), "spec.development", otherModelsDeployment)

		By("a deployment of its own is admitted")
		patch = client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"development":"mine"}}`))
		Expect(k8s.Patch(ctx, m.DeepCopy(), patch)).To(Succeed())
	})

	It("admits a pointer at a deployment that does not exist yet, with a warning, on create and on update", func() {
		m := model(ns, "m", "production", "later")
		m.Spec.Development = "later-dev"
		Expect(k8s.Create(ctx, m)).To(Succeed())
		m.Spec.Environments = append(m.Spec.Environments, gatewayv1.ModelEnvironment{Name: "staging", Deployment: "not-yet"})
		Expect(k8s.Update(ctx, m)).To(Succeed())

		By("the deployment created afterwards for the model is what the pointer meant")
		Expect(k8s.Create(ctx, deployment(ns, "later", "m"))).To(Succeed())
	})

	It("refuses a pointer that could name no deployment as invalid, on create and on update", func() {
		const rule = "must name a deployment"
		expectRefused(k8s.Create(ctx, model(ns, "m", "production", "a/b")), "spec.environments[0].deployment", rule)
		m := model(ns, "m", "production", "mine")
		m.Spec.Development = "../../x"
		expectRefused(k8s.Create(ctx, m), "spec.development", rule)

		m.Spec.Development = ""
		Expect(k8s.Create(ctx, m)).To(Succeed())
		m.Spec.Environments = append(m.Spec.Environments, gatewayv1.ModelEnvironment{Name: "staging", Deployment: "../x"})
		expectRefused(k8s.Update(ctx, m), "spec.environments[1].deployment", rule)
		patch := client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"development":"a/b"}}`))
		expectRefused(k8s.Patch(ctx, model(ns, "m"), patch), "spec.development", rule)
	})

	It("refuses a pointer at a deployment being deleted", func() {
		leaving := deployment(ns, "leaving", "m")
		leaving.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, leaving)).To(Succeed())
		Expect(k8s.Delete(ctx, leaving)).To(Succeed())
		expectRefused(k8s.Create(ctx, model(ns, "m", "production", "leaving")),
			"spec.environments[0].deployment", "ModelDeployment leaving is being deleted")
		release(leaving)
	})
})

var _ = Describe("ModelDeployment webhook", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("refuses the environment words as names", func() {
		for _, name := range []string{"production", "development"} {
			expectRefused(k8s.Create(ctx, deployment(ns, name, "m")), "metadata.name",
				`"`+name+`" addresses an environment in the model routes`)
		}
	})

	It("refuses a name that is not a DNS-1035 label of at most 60 characters", func() {
		expectRefused(k8s.Create(ctx, deployment(ns, "1st", "m")), "metadata.name", "a DNS-1035 label must consist of")
		expectRefused(k8s.Create(ctx, deployment(ns, "v1.2", "m")), "metadata.name", "a DNS-1035 label must consist of")
		expectRefused(k8s.Create(ctx, deployment(ns, strings.Repeat("a", 61), "m")), "metadata.name", "may not be more than 60 bytes")
		Expect(k8s.Create(ctx, deployment(ns, strings.Repeat("a", 60), "m"))).To(Succeed())
	})

	It("refuses a model label other than spec.modelID, on create and on update", func() {
		const path, rule = "metadata.labels[" + gatewayv1.LabelModel + "]", "must equal spec.modelID (m)"
		md := deployment(ns, "d1", "m")
		md.Labels = map[string]string{gatewayv1.LabelModel: "other"}
		expectRefused(k8s.Create(ctx, md), path, rule)

		md.Labels[gatewayv1.LabelModel] = "m"
		Expect(k8s.Create(ctx, md)).To(Succeed())
		md.Labels[gatewayv1.LabelModel] = "other"
		expectRefused(k8s.Update(ctx, md), path, rule)

		unlabelled := deployment(ns, "d2", "m")
		Expect(k8s.Create(ctx, unlabelled)).To(Succeed())
		patch := client.RawPatch(client.Merge.Type(), []byte(`{"metadata":{"labels":{"`+gatewayv1.LabelModel+`":"other"}}}`))
		expectRefused(k8s.Patch(ctx, unlabelled, patch), path, rule)
	})

	It("refuses deleting a deployment an environment serves, naming the environments, until another is promoted", func() {
		Expect(k8s.Create(ctx, deployment(ns, "v1", "m"))).To(Succeed())
		Expect(k8s.Create(ctx, deployment(ns, "v2", "m"))).To(Succeed())
		m := model(ns, "m", "production", "v1", "staging", "v1")
		m.Spec.Development = "v1"
		Expect(k8s.Create(ctx, m)).To(Succeed())

		err := k8s.Delete(ctx, deployment(ns, "v1", "m"))
		expectRefused(err, "metadata.name",
			`ModelDeployment v1 serves the environments "development", "production", "staging" of model m; promote another deployment to them first`)

		By("promoting v2 to production and staging; development still serves v1")
		m.Spec.Environments = []gatewayv1.ModelEnvironment{{Name: "production", Deployment: "v2"}, {Name: "staging", Deployment: "v2"}}
		Expect(k8s.Update(ctx, m)).To(Succeed())
		expectRefused(k8s.Delete(ctx, deployment(ns, "v1", "m")), "metadata.name",
			`serves the environment "development" of model m; promote another deployment to it first`)

		By("clearing development")
		m.Spec.Development = ""
		Expect(k8s.Update(ctx, m)).To(Succeed())
		Expect(k8s.Delete(ctx, deployment(ns, "v1", "m"))).To(Succeed())
		Expect(k8s.Delete(ctx, deployment(ns, "v2", "m"))).NotTo(Succeed(), "production still serves v2")
	})

	It("admits deleting a served deployment once its Model is being deleted", func() {
		Expect(k8s.Create(ctx, deployment(ns, "v1", "m"))).To(Succeed())
		m := model(ns, "m", "production", "v1")
		m.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, m)).To(Succeed())
		expectRefused(k8s.Delete(ctx, deployment(ns, "v1", "m")), "metadata.name", `serves the environment "production"`)

		Expect(k8s.Delete(ctx, m)).To(Succeed())
		Expect(k8s.Delete(ctx, deployment(ns, "v1", "m"))).To(Succeed())
		release(m)
	})

	It("admits deleting a deployment whose Model does not exist", func() {
		Expect(k8s.Create(ctx, deployment(ns, "v1", "gone"))).To(Succeed())
		Expect(k8s.Delete(ctx, deployment(ns, "v1", "gone"))).To(Succeed())
	})
})
