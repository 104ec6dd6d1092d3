package rest_test

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
)

// modelWorkspace is a workspace with a Model "sentiment" whose url deployments v1 (production, and staging) and
// v2 point at a real server on 127.0.0.1 that answers /health, so the manager reports them ACTIVE.
func modelWorkspace() (ns, admin string) {
	GinkgoHelper()
	ns, admin = workspace(gatewayv1.KeyTypeManageAll, "")
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	DeferCleanup(health.Close)
	for _, id := range []string{"v1", "v2"} {
		Expect(k8s.Create(ctx, &gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns},
			Spec:       gatewayv1.ModelDeploymentSpec{ModelID: "sentiment", Source: gatewayv1.DeploymentSource{URL: health.URL}},
		})).To(Succeed())
	}
	Expect(k8s.Create(ctx, &gatewayv1.Model{
		ObjectMeta: metav1.ObjectMeta{Name: "sentiment", Namespace: ns},
		Spec: gatewayv1.ModelSpec{DisplayName: "Sentiment", Environments: []gatewayv1.ModelEnvironment{
			{Name: "production", Deployment: "v1"}, {Name: "staging", Deployment: "v1"}}},
	})).To(Succeed())
	for _, id := range []string{"v1", "v2"} {
		Eventually(func() gatewayv1.DeploymentStatus {
			d := &gatewayv1.ModelDeployment{}
			_ = k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, d)
			return d.Status.Status
		}).WithTimeout(30 * time.Second).Should(Equal(gatewayv1.StatusActive))
	}
	return ns, admin
}

func deploymentActive(ns, id string) bool {
	GinkgoHelper()
	d := &gatewayv1.ModelDeployment{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, d)).To(Succeed())
	return d.Spec.IsActive()
}

var _ = Describe("Model routes", func() {
	It("list and get models, deployments and environments in the documented shapes", func() {
		_, admin := modelWorkspace()
		r := call(server, admin, http.MethodGet, "/v1/models", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("ModelList", r.raw)
		models := r.body["models"].([]any)
		Expect(models).To(HaveLen(1))
		Expect(models[0]).To(HaveKeyWithValue("production_deployment_id", "v1"))
		Expect(models[0]).To(HaveKeyWithValue("deployments_count", BeNumerically("==", 2)))

		r = call(server, admin, http.MethodGet, "/v1/models/sentiment", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("Model", r.raw)
		Expect(r.body).To(HaveKeyWithValue("name", "Sentiment"))

		r = call(server, admin, http.MethodGet, "/v1/models/sentiment/deployments", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("DeploymentList", r.raw)

		for _, id := range []string{"v1", "production"} {
			r = call(server, admin, http.MethodGet, "/v1/models/sentiment/deployments/"+id, nil)
			Expect(r.code).To(Equal(http.StatusOK), "%s", r)
			conform("Deployment", r.raw)
			Expect(r.body).To(HaveKeyWithValue("id", "v1"))
			Expect(r.body).To(HaveKeyWithValue("is_production", true))
			Expect(r.body).To(HaveKeyWithValue("status", "ACTIVE"))
		}
		r = call(server, admin, http.MethodGet, "/v1/models/sentiment/deployments/development", nil)
		Expect(r.code).To(Equal(http.StatusNotFound), "no development deployment: %s", r)
		conform("Error", r.raw)

		r = call(server, admin, http.MethodGet, "/v1/models/sentiment/environments", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("EnvironmentList", r.raw)
		Expect(r.body["environments"]).To(HaveLen(2))
		r = call(server, admin, http.MethodGet, "/v1/models/sentiment/environments/staging", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("Environment", r.raw)
		Expect(r.body["current_deployment"]).To(HaveKeyWithValue("id", "v1"))
	})

	It("activate and deactivate answer {success, no_op}; of 8 concurrent activations exactly one changes anything", func() {
		ns, admin := modelWorkspace()
		r := call(server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v2/activate", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("Activation", r.raw)
		Expect(r.body).To(Equal(map[string]any{"success": true, "no_op": true}))

		r = call(server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v2/deactivate", nil)
		Expect(r.body).To(Equal(map[string]any{"success": true, "no_op": false}), "%s", r)
		Expect(deploymentActive(ns, "v2")).To(BeFalse())

		// Eight callers with keys of their own, so no per-key rate limit is involved.
		keys := make([]string, 8)
		for i := range keys {
			keys[i] = seedKey(ns, gatewayv1.KeyTypeManageAll, "", "")
		}
		Eventually(func() int {
			return call(server, keys[7], http.MethodGet, "/v1/models", nil).code
		}).Should(Equal(http.StatusOK))
		results := make([]response, len(keys))
		var wg sync.WaitGroup
		for i, k := range keys {
			wg.Go(func() {
				results[i] = call(server, k, http.MethodPost, "/v1/models/sentiment/deployments/v2/activate", nil)
			})
		}
		wg.Wait()
		changed := 0
		for _, res := range results {
			Expect(res.code).To(Equal(http.StatusOK), "%s", res)
			if res.body["no_op"] == false {
				changed++
			}
		}
		Expect(changed).To(Equal(1), "exactly one concurrent activation changes the deployment")
		Expect(deploymentActive(ns, "v2")).To(BeTrue())

		// Environments address the deployment they serve.
		r = call(server, admin, http.MethodPost, "/v1/models/sentiment/environments/staging/deactivate", nil)
		Expect(r.body).To(Equal(map[string]any{"success": true, "no_op": false}), "%s", r)
		Expect(deploymentActive(ns, "v1")).To(BeFalse())
		r = call(server, admin, http.MethodPost, "/v1/models/sentiment/deployments/production/activate", nil)
		Expect(r.body).To(Equal(map[string]any{"success": true, "no_op": false}), "%s", r)
		Expect(deploymentActive(ns, "v1")).To(BeTrue())
	})

	It("answer the 21st activation in a minute with the exact 429 body of docs/rest-api.md", func() {
		clk := &clock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
		srv := serve(rest.Options{Clock: clk.Now})
		_, admin := modelWorkspace()
		for i := range 20 {
			r := call(srv, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/activate", nil)
			Expect(r.code).To(Equal(http.StatusOK), "call %d: %s", i+1, r)
		}
		r := call(srv, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/activate", nil)
		Expect(r.code).To(Equal(http.StatusTooManyRequests))
		Expect(r.body).To(Equal(map[string]any{"error": "Rate limit exceeded. Please try again later.", "retry_after": float64(60)}))
		Expect(r.header.Get("Retry-After")).To(Equal("60"))
		// Another route keeps its own budget.
		Expect(call(srv, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/deactivate", nil).code).To(Equal(http.StatusOK))
	})

	It("promote points the environment at another deployment and scales the previous one down", func() {
		ns, admin := modelWorkspace()
		r := call(server, admin, http.MethodPost, "/v1/models/sentiment/environments/staging/promote", map[string]any{"deployment_id": "v2"})
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("Environment", r.raw)
		Expect(r.body["current_deployment"]).To(HaveKeyWithValue("id", "v2"))
		// v1 still serves production, so it is not scaled down.
		d := &gatewayv1.ModelDeployment{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "v1"}, d)).To(Succeed())
		Expect(d.Annotations).NotTo(HaveKey(gatewayv1.AnnotationScaledDownAt))
		Expect(mustSnapshot(ns).Models[0].Environments).To(ContainElement(HaveField("Deployment", "v2")))

		r = call(server, admin, http.MethodPost, "/v1/models/sentiment/environments/production/promote", map[string]any{"deployment_id": "v2"})
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "v1"}, d)).To(Succeed())
		Expect(d.Annotations).To(HaveKey(gatewayv1.AnnotationScaledDownAt))

		for _, tc := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{}, "deployment_id"},
			{map[string]any{"deployment_id": "nope"}, "deployment_id"},
		} {
			r = call(server, admin, http.MethodPost, "/v1/models/sentiment/environments/production/promote", tc.body)
			Expect(r.code).To(Equal(http.StatusBadRequest), "%s", r)
			conform("Error", r.raw)
			Expect(r.body["detail"]).To(ContainElement(HaveKeyWithValue("field", tc.field)))
		}
		// An inactive deployment cannot be promoted.
		Expect(call(server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/deactivate", nil).code).To(Equal(http.StatusOK))
		r = call(server, admin, http.MethodPost, "/v1/models/sentiment/environments/production/promote", map[string]any{"deployment_id": "v1"})
		Expect(r.code).To(Equal(http.StatusBadRequest), "%s", r)
	})

	It("retry refuses a healthy deployment, logs come from its Events, and delete follows the environments", func() {
		ns, admin := modelWorkspace()
		r := call(server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/retry", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("Retry", r.raw)
		Expect(r.body).To(HaveKeyWithValue("retried", false))

		r = call(server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/logs", map[string]any{"direction": "asc", "limit": 10})
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("Logs", r.raw)
		Expect(r.body["logs"]).To(ContainElement(HaveKeyWithValue("message", ContainSubstring("ACTIVE"))))
		r = call(server, admin, http.MethodPost, "/v1/models/sentiment/deployments/v1/logs", map[string]any{"min_level": "LOUD"})
		Expect(r.code).To(Equal(http.StatusBadRequest), "%s", r)
		Expect(r.body["detail"]).To(ContainElement(HaveKeyWithValue("field", "min_level")))

		// v1 serves production: the admission webhook refuses to delete it.
		r = call(server, admin, http.MethodDelete, "/v1/models/sentiment/deployments/v1", nil)
		Expect(r.code).To(BeNumerically(">=", 400), "%s", r)
		conform("Error", r.raw)
		r = call(server, admin, http.MethodDelete, "/v1/models/sentiment/deployments/v2", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.body).To(Equal(map[string]any{"id": "v2", "deleted": true}))

		r = call(server, admin, http.MethodDelete, "/v1/models/sentiment", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("Deleted", r.raw)
		Expect(call(server, admin, http.MethodDelete, "/v1/models/sentiment", nil).code).To(Equal(http.StatusNotFound))
		Eventually(func() int {
			var list gatewayv1.ModelDeploymentList
			_ = k8s.List(ctx, &list, client.InNamespace(ns))
			return len(list.Items)
		}).WithTimeout(30 * time.Second).Should(BeZero())
	})

	It("keep models to the keys allowed to see and change them", func() {
		ns, _ := modelWorkspace()
		invoke := seedKey(ns, gatewayv1.KeyTypeInvoke, "", "")
		keys := seedKey(ns, gatewayv1.KeyTypeManageAPIKeys, "", "")
		Eventually(func() int { return call(server, keys, http.MethodGet, "/v1/models", nil).code }).Should(Equal(http.StatusOK))
		Expect(call(server, invoke, http.MethodGet, "/v1/models", nil).code).To(Equal(http.StatusForbidden))
		// Key-management keys list models to find scoping ids, but do not change them.
		r := call(server, keys, http.MethodPost, "/v1/models/sentiment/deployments/v1/deactivate", nil)
		Expect(r.code).To(Equal(http.StatusForbidden), "%s", r)
		conform("Error", r.raw)
		Expect(ptr.To(deploymentActive(ns, "v1"))).To(HaveValue(BeTrue()))
	})
})
