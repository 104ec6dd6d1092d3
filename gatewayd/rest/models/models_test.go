package models_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

// modelWorkspace is a workspace with a Model "sentiment" whose url deployments v1 (production, and staging) and
// v2 point at a real server on 127.0.0.1 that answers /health, so the manager reports them ACTIVE.
func modelWorkspace() (ns, admin string) {
	GinkgoHelper()
	ns, admin = resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	DeferCleanup(health.Close)
	for _, id := range []string{"v1", "v2"} {
		Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns},
			Spec:       gatewayv1.ModelDeploymentSpec{ModelID: "sentiment", Source: gatewayv1.DeploymentSource{URL: health.URL}},
		})).To(Succeed())
	}
	Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.Model{
		ObjectMeta: metav1.ObjectMeta{Name: "sentiment", Namespace: ns},
		Spec: gatewayv1.ModelSpec{DisplayName: "Sentiment", Environments: []gatewayv1.ModelEnvironment{
			{Name: "production", Deployment: "v1"}, {Name: "staging", Deployment: "v1"}}},
	})).To(Succeed())
	for _, id := range []string{"v1", "v2"} {
		Eventually(func() gatewayv1.DeploymentStatus {
			d := &gatewayv1.ModelDeployment{}
			_ = resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: id}, d)
			return d.Status.Status
		}).WithTimeout(30 * time.Second).Should(Equal(gatewayv1.StatusActive))
	}
	return ns, admin
}

func deploymentActive(ns, id string) bool {
	GinkgoHelper()
	d := &gatewayv1.ModelDeployment{}
	Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: id}, d)).To(Succeed())
	return d.Spec.IsActive()
}

var _ = Describe("Model routes", func() {
	It("list and get models, deployments and environments in the documented shapes", func() {
		_, admin := modelWorkspace()
		r := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("ModelList", r.Raw)
		models := r.Body["models"].([]any)
		Expect(models).To(HaveLen(1))
		Expect(models[0]).To(HaveKeyWithValue("production_deployment_id", "v1"))
		Expect(models[0]).To(HaveKeyWithValue("deployments_count", BeNumerically("==", 2)))

		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models/sentiment", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Model", r.Raw)
		Expect(r.Body).To(HaveKeyWithValue("name", "Sentiment"))

		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models/sentiment/deployments", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("DeploymentList", r.Raw)

		for _, id := range []string{"v1", "production"} {
			r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models/sentiment/deployments/"+id, nil)
			Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
			resttest.Conform("Deployment", r.Raw)
			Expect(r.Body).To(HaveKeyWithValue("id", "v1"))
			Expect(r.Body).To(HaveKeyWithValue("is_production", true))
			Expect(r.Body).To(HaveKeyWithValue("status", "ACTIVE"))
		}
		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models/sentiment/deployments/development", nil)
		Expect(r.Code).To(Equal(http.StatusNotFound), "no development deployment: %s", r)
		resttest.Conform("Error", r.Raw)

		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models/sentiment/environments", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("EnvironmentList", r.Raw)
		Expect(r.Body["environments"]).To(HaveLen(2))
		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models/sentiment/environments/staging", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Environment", r.Raw)
		Expect(r.Body["current_deployment"]).To(HaveKeyWithValue("id", "v1"))
	})

	It("activate and deactivate answer {success, no_op}; of 8 concurrent activations exactly one changes anything", func() {
		ns, admin := modelWorkspace()
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v2/activate", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Activation", r.Raw)
		Expect(r.Body).To(Equal(map[string]any{"success": true, "no_op": true}))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v2/deactivate", nil)
		Expect(r.Body).To(Equal(map[string]any{"success": true, "no_op": false}), "%s", r)
		Expect(deploymentActive(ns, "v2")).To(BeFalse())

		// Eight callers with keys of their own, so no per-key rate limit is involved.
		keys := make([]string, 8)
		for i := range keys {
			keys[i] = resttest.SeedKey(ns, gatewayv1.KeyTypeManageAll, "", "")
		}
		Eventually(func() int {
			return resttest.Call(resttest.Server, keys[7], http.MethodGet, "/v1/models", nil).Code
		}).Should(Equal(http.StatusOK))
		results := make([]resttest.Response, len(keys))
		var wg sync.WaitGroup
		for i, k := range keys {
			wg.Go(func() {
				results[i] = resttest.Call(resttest.Server, k, http.MethodPost, "/v1/models/sentiment/deployments/v2/activate", nil)
			})
		}
		wg.Wait()
		changed := 0
		for _, res := range results {
			Expect(res.Code).To(Equal(http.StatusOK), "%s", res)
			if res.Body["no_op"] == false {
				changed++
			}
		}
		Expect(changed).To(Equal(1), "exactly one concurrent activation changes the deployment")
		Expect(deploymentActive(ns, "v2")).To(BeTrue())

		// Environments address the deployment they serve.
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/environments/staging/deactivate", nil)
		Expect(r.Body).To(Equal(map[string]any{"success": true, "no_op": false}), "%s", r)
		Expect(deploymentActive(ns, "v1")).To(BeFalse())
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/deployments/production/activate", nil)
		Expect(r.Body).To(Equal(map[string]any{"success": true, "no_op": false}), "%s", r)
		Expect(deploymentActive(ns, "v1")).To(BeTrue())
	})

	It("answer the 21st activation in a minute with the exact 429 body of docs/rest-api.md", func() {
		clk := resttest.NewClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
		srv := resttest.Serve(rest.Options{Clock: clk.Now})
		_, admin := modelWorkspace()
		for i := range 20 {
			r := resttest.Call(srv, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/activate", nil)
			Expect(r.Code).To(Equal(http.StatusOK), "call %d: %s", i+1, r)
		}
		r := resttest.Call(srv, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/activate", nil)
		Expect(r.Code).To(Equal(http.StatusTooManyRequests))
		Expect(r.Body).To(Equal(map[string]any{"error": "Rate limit exceeded. Please try again later.", "retry_after": float64(60)}))
		Expect(r.Header.Get("Retry-After")).To(Equal("60"))
		// Another route keeps its own budget.
		Expect(resttest.Call(srv, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/deactivate", nil).Code).To(Equal(http.StatusOK))
	})

	It("promote points the environment at another deployment and scales the previous one down", func() {
		ns, admin := modelWorkspace()
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/environments/staging/promote", map[string]any{"deployment_id": "v2"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Environment", r.Raw)
		Expect(r.Body["current_deployment"]).To(HaveKeyWithValue("id", "v2"))
		// v1 still serves production, so it is not scaled down.
		d := &gatewayv1.ModelDeployment{}
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "v1"}, d)).To(Succeed())
		Expect(d.Annotations).NotTo(HaveKey(gatewayv1.AnnotationScaledDownAt))
		Expect(resttest.MustSnapshot(ns).Models[0].Environments).To(ContainElement(HaveField("Deployment", "v2")))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/environments/production/promote", map[string]any{"deployment_id": "v2"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "v1"}, d)).To(Succeed())
		Expect(d.Annotations).To(HaveKey(gatewayv1.AnnotationScaledDownAt))

		for _, tc := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{}, "deployment_id"},
			{map[string]any{"deployment_id": "nope"}, "deployment_id"},
		} {
			r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/environments/production/promote", tc.body)
			Expect(r.Code).To(Equal(http.StatusBadRequest), "%s", r)
			resttest.Conform("Error", r.Raw)
			Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", tc.field)))
		}
		// An inactive deployment cannot be promoted.
		Expect(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/deactivate", nil).Code).To(Equal(http.StatusOK))
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/environments/production/promote", map[string]any{"deployment_id": "v1"})
		Expect(r.Code).To(Equal(http.StatusBadRequest), "%s", r)
	})

	It("retry refuses a healthy deployment, logs come from its Events, and delete follows the environments", func() {
		ns, admin := modelWorkspace()
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/retry", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Retry", r.Raw)
		Expect(r.Body).To(HaveKeyWithValue("retried", false))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/logs", map[string]any{"direction": "asc", "limit": 10})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Logs", r.Raw)
		Expect(r.Body["logs"]).To(ContainElement(HaveKeyWithValue("message", ContainSubstring("ACTIVE"))))
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/logs", map[string]any{"min_level": "LOUD"})
		Expect(r.Code).To(Equal(http.StatusBadRequest), "%s", r)
		Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", "min_level")))

		// v1 serves production: the admission webhook refuses to delete it.
		r = resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/models/sentiment/deployments/v1", nil)
		Expect(r.Code).To(BeNumerically(">=", 400), "%s", r)
		resttest.Conform("Error", r.Raw)
		r = resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/models/sentiment/deployments/v2", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body).To(Equal(map[string]any{"id": "v2", "deleted": true}))

		r = resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/models/sentiment", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Deleted", r.Raw)
		Expect(resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/models/sentiment", nil).Code).To(Equal(http.StatusNotFound))
		Eventually(func() int {
			var list gatewayv1.ModelDeploymentList
			_ = resttest.Client.List(resttest.Ctx, &list, client.InNamespace(ns))
			return len(list.Items)
		}).WithTimeout(30 * time.Second).Should(BeZero())
	})

	It("keep models to the keys allowed to see and change them", func() {
		ns, _ := modelWorkspace()
		invoke := resttest.SeedKey(ns, gatewayv1.KeyTypeInvoke, "", "")
		keys := resttest.SeedKey(ns, gatewayv1.KeyTypeManageAPIKeys, "", "")
		Eventually(func() int { return resttest.Call(resttest.Server, keys, http.MethodGet, "/v1/models", nil).Code }).Should(Equal(http.StatusOK))
		Expect(resttest.Call(resttest.Server, invoke, http.MethodGet, "/v1/models", nil).Code).To(Equal(http.StatusForbidden))
		// Key-management keys list models to find scoping ids, but do not change them.
		r := resttest.Call(resttest.Server, keys, http.MethodPost, "/v1/models/sentiment/deployments/v1/deactivate", nil)
		Expect(r.Code).To(Equal(http.StatusForbidden), "%s", r)
		resttest.Conform("Error", r.Raw)
		Expect(ptr.To(deploymentActive(ns, "v1"))).To(HaveValue(BeTrue()))
	})
})
