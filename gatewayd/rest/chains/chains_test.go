package chains_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

// chainWorkspace is a workspace with a Chain "pipe" whose ChainDeployments c1 (production and development) and
// c2 (no environment yet) run two url chainlets each, "front" (the entrypoint) and "back", at a real server on
// 127.0.0.1 that answers /health, so the manager reports them ACTIVE. "staging" points at nothing.
func chainWorkspace() (ns, admin string) {
	GinkgoHelper()
	ns, admin = resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	DeferCleanup(health.Close)
	for _, id := range []string{"c1", "c2"} {
		Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.ChainDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns},
			Spec: gatewayv1.ChainDeploymentSpec{ChainID: "pipe", Entrypoint: "front", Chainlets: []gatewayv1.Chainlet{
				{Name: "front", Source: gatewayv1.DeploymentSource{URL: health.URL}},
				{Name: "back", Source: gatewayv1.DeploymentSource{URL: health.URL}},
			}},
		})).To(Succeed())
	}
	Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.Chain{
		ObjectMeta: metav1.ObjectMeta{Name: "pipe", Namespace: ns},
		Spec: gatewayv1.ChainSpec{DisplayName: "Pipe", Development: "c1", Environments: []gatewayv1.ChainEnvironment{
			{Name: "production", Deployment: "c1"}, {Name: "staging"}}},
	})).To(Succeed())
	for _, id := range []string{"c1", "c2"} {
		Eventually(func() gatewayv1.DeploymentStatus {
			cd := &gatewayv1.ChainDeployment{}
			_ = resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: id}, cd)
			return cd.Status.Status
		}).WithTimeout(30 * time.Second).Should(Equal(gatewayv1.StatusActive))
	}
	return ns, admin
}

func chainletAnnotations(ns, name string) (active bool, annotations map[string]string) {
	GinkgoHelper()
	md := &gatewayv1.ModelDeployment{}
	Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: name}, md)).To(Succeed())
	return md.Spec.IsActive(), md.Annotations
}

var _ = Describe("Chain routes", func() {
	It("answer exactly one of concurrent DELETEs of a chain deleted, the others 404", func() {
		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		for round := range 3 {
			id := fmt.Sprintf("race-%d", round)
			ch := &gatewayv1.Chain{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns}, Spec: gatewayv1.ChainSpec{DisplayName: id,
				Environments: []gatewayv1.ChainEnvironment{{Name: "production"}}}}
			Expect(resttest.Client.Create(resttest.Ctx, ch)).To(Succeed())
			// The finalizer holds the Chain while it is being deleted, so a second delete of it succeeds again.
			Eventually(func(g Gomega) {
				g.Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKeyFromObject(ch), ch)).To(Succeed())
				g.Expect(ch.Finalizers).To(ContainElement(gatewayv1.ChainFinalizer))
			}).WithTimeout(30 * time.Second).Should(Succeed())

			const callers = 6
			answers := make([]resttest.Response, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() { answers[i] = resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/chains/"+id, nil) })
			}
			wg.Wait()
			deleted := 0
			for _, r := range answers {
				switch r.Code {
				case http.StatusOK:
					Expect(r.Body).To(HaveKeyWithValue("deleted", true), "%s", r)
					deleted++
				case http.StatusNotFound:
					Expect(r.Body).To(HaveKeyWithValue("error", fmt.Sprintf("Chain %q not found.", id)), "%s", r)
				default:
					Fail(fmt.Sprintf("round %d: DELETE answered %s", round, r))
				}
			}
			Expect(deleted).To(Equal(1), "round %d: the DELETEs that answered deleted", round)
		}
	})

	It("list and get chains, deployments and environments in the documented shapes", func() {
		_, admin := chainWorkspace()
		r := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/chains", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("ChainList", r.Raw)
		Expect(r.Body["chains"]).To(ConsistOf(And(
			HaveKeyWithValue("id", "pipe"), HaveKeyWithValue("name", "Pipe"), HaveKeyWithValue("team_name", ""),
			HaveKeyWithValue("deployments_count", BeNumerically("==", 2)),
			HaveKeyWithValue("production_deployment_id", "c1"), HaveKeyWithValue("development_deployment_id", "c1"))))

		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/chains/pipe", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Chain", r.Raw)
		Expect(r.Body).To(HaveLen(8))
		Expect(r.Body).To(HaveKeyWithValue("team_id", r.Body["team_name"]), "team_id is the id team_name has always held")
		Expect(r.Body).To(HaveKeyWithValue("deployments_count", BeNumerically("==", 2)))

		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/chains/pipe/deployments", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("ChainDeploymentList", r.Raw)
		deps := r.Body["deployments"].([]any)
		Expect(deps).To(HaveLen(2))
		Expect(deps[0]).To(And(HaveKeyWithValue("id", "c1"), HaveKeyWithValue("chain_id", "pipe"), HaveKeyWithValue("environment", "production"),
			HaveKeyWithValue("is_production", true), HaveKeyWithValue("is_development", true), HaveKeyWithValue("entrypoint", "front")))
		Expect(deps[0].(map[string]any)["chainlets"]).To(Equal([]any{
			map[string]any{"name": "front", "deployment_id": "c1-front", "status": "ACTIVE", "active_replica_count": float64(1), "is_entrypoint": true},
			map[string]any{"name": "back", "deployment_id": "c1-back", "status": "ACTIVE", "active_replica_count": float64(1), "is_entrypoint": false},
		}))
		Expect(deps[1]).To(And(HaveKeyWithValue("id", "c2"), HaveKeyWithValue("environment", BeNil()), HaveKeyWithValue("is_production", false)))

		// Environments in spec order, development last; one that serves nothing has no current deployment.
		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/chains/pipe/environments", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("ChainEnvironmentList", r.Raw)
		envs := r.Body["environments"].([]any)
		Expect(envs).To(HaveLen(3))
		for i, want := range []struct{ name, current any }{{"production", "c1"}, {"staging", nil}, {"development", "c1"}} {
			Expect(envs[i]).To(And(HaveKeyWithValue("name", want.name), HaveKeyWithValue("chain_id", "pipe"), HaveLen(4)))
			if want.current == nil {
				Expect(envs[i]).To(HaveKeyWithValue("current_deployment", BeNil()))
			} else {
				Expect(envs[i].(map[string]any)["current_deployment"]).To(HaveKeyWithValue("id", want.current))
			}
		}
		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/chains/pipe/environments/development", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("ChainEnvironment", r.Raw)
		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/chains/pipe/environments/nope", nil)
		Expect(r.Code).To(Equal(http.StatusNotFound), "%s", r)
		Expect(r.Body).To(HaveKeyWithValue("error", `Chain "pipe" has no environment "nope".`))
		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/chains/other", nil)
		Expect(r.Code).To(Equal(http.StatusNotFound), "%s", r)
	})

	It("activate and deactivate every chainlet of the environment's deployment, answering the entrypoint's no_op", func() {
		ns, admin := chainWorkspace()
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/production/activate", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Activation", r.Raw)
		Expect(r.Body).To(Equal(map[string]any{"success": true, "no_op": true}))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/production/deactivate", nil)
		Expect(r.Body).To(Equal(map[string]any{"success": true, "no_op": false}), "%s", r)
		for _, md := range []string{"c1-front", "c1-back"} {
			active, _ := chainletAnnotations(ns, md)
			Expect(active).To(BeFalse(), "%s is deactivated", md)
		}
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/development/deactivate", nil)
		Expect(r.Body).To(Equal(map[string]any{"success": true, "no_op": true}), "development serves the same deployment: %s", r)

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/staging/activate", nil)
		Expect(r.Code).To(Equal(http.StatusNotFound), "%s", r)
		Expect(r.Body).To(HaveKeyWithValue("error", `No chain deployment is promoted to environment "staging" yet.`))
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/nope/activate", nil)
		Expect(r.Code).To(Equal(http.StatusNotFound), "%s", r)
		Expect(r.Body).To(HaveKeyWithValue("error", `Chain "pipe" has no environment "nope".`))
	})

	It("promote points the environment at another deployment and scales the previous one down only when nothing else serves it", func() {
		ns, admin := chainWorkspace()
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/production/promote", map[string]any{"deployment_id": "c2"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("ChainEnvironment", r.Raw)
		Expect(r.Body).To(And(HaveKeyWithValue("name", "production"), HaveKeyWithValue("chain_id", "pipe")))
		Expect(r.Body["current_deployment"]).To(And(HaveKeyWithValue("id", "c2"), HaveKeyWithValue("is_production", true)))
		Expect(resttest.MustSnapshot(ns).Chains[0].Environments).To(ContainElement(HaveField("Deployment", "c2")))
		// c1 still serves development, so its chainlets are not scaled down.
		_, ann := chainletAnnotations(ns, "c1-front")
		Expect(ann).NotTo(HaveKey(gatewayv1.AnnotationScaledDownAt))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/development/promote",
			map[string]any{"deployment_id": "c2", "scale_down_previous_deployment": false})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		_, ann = chainletAnnotations(ns, "c1-back")
		Expect(ann).NotTo(HaveKey(gatewayv1.AnnotationScaledDownAt), "asked not to scale down")

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/staging/promote", map[string]any{"deployment_id": "c1"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/staging/promote", map[string]any{"deployment_id": "c2"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		for _, md := range []string{"c1-front", "c1-back"} {
			_, ann = chainletAnnotations(ns, md)
			Expect(ann).To(HaveKey(gatewayv1.AnnotationScaledDownAt), "%s: c1 serves nothing now", md)
		}

		for _, tc := range []struct {
			body map[string]any
			msg  string
		}{
			{map[string]any{}, "deployment_id is required: the id of a deployment of this chain."},
			{map[string]any{"deployment_id": "nope"}, `Chain "pipe" has no deployment "nope".`},
		} {
			r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/chains/pipe/environments/production/promote", tc.body)
			Expect(r.Code).To(Equal(http.StatusBadRequest), "%s", r)
			resttest.Conform("Error", r.Raw)
			Expect(r.Body["detail"]).To(ContainElement(And(HaveKeyWithValue("field", "deployment_id"), HaveKeyWithValue("message", tc.msg))))
		}
	})
})
