package models_test

import (
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

// refusedField asserts a 400 (or the given status) whose detail names field, in the envelope.
func refusedField(r resttest.Response, status int, field string) {
	GinkgoHelper()
	Expect(r.Code).To(Equal(status), "%s", r)
	resttest.Conform("Error", r.Raw)
	Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", field)), "%s", r)
}

var _ = Describe("Model create and patch", func() {
	It("POST /v1/models creates a Model with its environments, display name and team, refusing by the Model's rules", func() {
		ns, admin := modelWorkspace()
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models", map[string]any{
			"id": "fresh", "display_name": "Fresh", "environments": []any{map[string]any{"name": "production"}, map[string]any{"name": "staging"}}})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.Conform("Model", r.Raw)
		Expect(r.Body).To(HaveKeyWithValue("id", "fresh"))
		Expect(r.Body).To(HaveKeyWithValue("name", "Fresh"))
		Expect(r.Body).To(HaveKeyWithValue("production_deployment_id", BeNil()))
		m := &gatewayv1.Model{}
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "fresh"}, m)).To(Succeed())
		Expect(m.Spec.Environments).To(HaveLen(2))
		Expect(m.Spec.DisplayName).To(Equal("Fresh"))

		// Without environments, production alone; GET answers the same model.
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models", map[string]any{"id": "plain"})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "plain"}, m)).To(Succeed())
		Expect(m.Spec.Environments).To(Equal([]gatewayv1.ModelEnvironment{{Name: "production"}}))
		Expect(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models/plain", nil).Body).To(HaveKeyWithValue("name", "plain"))

		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models", map[string]any{"id": "fresh"}), http.StatusConflict, "conflict")

		for _, tc := range []struct {
			name  string
			body  map[string]any
			field string
		}{
			{"no id", map[string]any{"display_name": "x"}, "id"},
			{"an id that is no object name", map[string]any{"id": "Not An Id"}, "id"},
			// The CRD's CEL rules.
			{"no production", map[string]any{"id": "a1", "environments": []any{map[string]any{"name": "staging"}}}, "environments"},
			{"development as an environment", map[string]any{"id": "a2", "environments": []any{map[string]any{"name": "production"}, map[string]any{"name": "development"}}}, "environments"},
			{"display name with a leading space", map[string]any{"id": "a3", "display_name": " x"}, "display_name"},
			{"an environment name that is no label", map[string]any{"id": "a4", "environments": []any{map[string]any{"name": "production"}, map[string]any{"name": "Stage!"}}}, "environments[1].name"},
			// The Model webhook: a pointer must name a deployment of this model (v1 is sentiment's).
			{"a pointer at another model's deployment", map[string]any{"id": "a5", "environments": []any{map[string]any{"name": "production", "deployment": "v1"}}}, "environments[0].deployment"},
			{"a development pointer at another model's deployment", map[string]any{"id": "a6", "development": "v2"}, "development"},
		} {
			By(tc.name)
			r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models", tc.body)
			refusedField(r, http.StatusBadRequest, tc.field)
		}
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models", map[string]any{"id": "a7", "team": "red"})
		resttest.ExpectError(r, http.StatusBadRequest, "unknown_field")
		Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", "team")))

		// Decide: a key that may not manage models is refused, naming its type.
		invoke := resttest.SeedKey(ns, gatewayv1.KeyTypeInvoke, "", "user-2")
		r = resttest.Call(resttest.Server, invoke, http.MethodPost, "/v1/models", map[string]any{"id": "b1"})
		resttest.ExpectError(r, http.StatusForbidden, "forbidden")
		Expect(r.Body["detail"]).To(HaveKeyWithValue("key_type", string(gatewayv1.KeyTypeInvoke)))
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "b1"}, m)).NotTo(Succeed())
	})

	It("PATCH /v1/models/{model_id} changes the display name and the environment pointers, refusing by the Model's rules", func() {
		ns, admin := modelWorkspace()
		Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: "o1", Namespace: ns},
			Spec:       gatewayv1.ModelDeploymentSpec{ModelID: "other", Source: gatewayv1.DeploymentSource{URL: "http://127.0.0.1:9"}},
		})).To(Succeed())
		r := resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{
			"display_name": "Mood", "environments": []any{map[string]any{"name": "staging", "deployment": "v2"}, map[string]any{"name": "canary", "deployment": "v2"}},
			"development": "v1"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Model", r.Raw)
		Expect(r.Body).To(HaveKeyWithValue("name", "Mood"))
		Expect(r.Body).To(HaveKeyWithValue("development_deployment_id", "v1"))
		Expect(r.Body).To(HaveKeyWithValue("deployments_count", BeNumerically("==", 2)))
		m := &gatewayv1.Model{}
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "sentiment"}, m)).To(Succeed())
		Expect(m.Spec.Environments).To(Equal([]gatewayv1.ModelEnvironment{
			{Name: "production", Deployment: "v1"}, {Name: "staging", Deployment: "v2"}, {Name: "canary", Deployment: "v2"}}))

		for _, tc := range []struct {
			name  string
			body  map[string]any
			field string
		}{
			{"nothing to change", map[string]any{}, "display_name"},
			{"a pointer at another model's deployment", map[string]any{"environments": []any{map[string]any{"name": "production", "deployment": "o1"}}}, "environments[0].deployment"},
			{"a development pointer at another model's deployment", map[string]any{"development": "o1"}, "development"},
			{"development as an environment", map[string]any{"environments": []any{map[string]any{"name": "development", "deployment": "v1"}}}, "environments"},
			{"display name with a control character", map[string]any{"display_name": "a\u0007b"}, "display_name"},
		} {
			By(tc.name)
			refusedField(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", tc.body), http.StatusBadRequest, tc.field)
		}
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{"team_id": "red"}), http.StatusBadRequest, "unknown_field")
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/nope", map[string]any{"display_name": "x"}), http.StatusNotFound, "not_found")
		invoke := resttest.SeedKey(ns, gatewayv1.KeyTypeInvoke, "", "user-2")
		resttest.ExpectError(resttest.Call(resttest.Server, invoke, http.MethodPatch, "/v1/models/sentiment", map[string]any{"display_name": "x"}), http.StatusForbidden, "forbidden")
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "sentiment"}, m)).To(Succeed())
		Expect(m.Spec.DisplayName).To(Equal("Mood"))
	})
})
