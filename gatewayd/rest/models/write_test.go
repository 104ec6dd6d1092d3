package models_test

import (
	"fmt"
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
			{"nothing to change", map[string]any{}, "name"},
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

var _ = Describe("Model writes: wire names and refusals", func() {
	It("takes name on POST and PATCH, as answers give it, with display_name kept as its alias", func() {
		ns, admin := modelWorkspace()
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models", map[string]any{"id": "named", "name": "Named"})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		Expect(r.Body).To(HaveKeyWithValue("name", "Named"))

		By("what GET answers is written back as it is")
		got := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models/sentiment", nil)
		Expect(got.Code).To(Equal(http.StatusOK), "%s", got)
		Expect(got.Body).To(HaveKeyWithValue("team_id", ""))
		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{
			"name": got.Body["name"].(string) + " 2", "development_deployment_id": "v2"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Model", r.Raw)
		Expect(r.Body).To(HaveKeyWithValue("name", "Sentiment 2"))
		Expect(r.Body).To(HaveKeyWithValue("development_deployment_id", "v2"))

		By("the older names still work, and equal values under both names are one value")
		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{"display_name": "Mood", "development": "v1"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body).To(HaveKeyWithValue("name", "Mood"))
		Expect(r.Body).To(HaveKeyWithValue("development_deployment_id", "v1"))
		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{"name": "Mood", "display_name": "Mood"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)

		By("two different values under the two names are refused, naming the older name")
		refusedField(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{"name": "A", "display_name": "B"}),
			http.StatusBadRequest, "display_name")
		refusedField(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models", map[string]any{"id": "two", "development_deployment_id": "v1", "development": "v2"}),
			http.StatusBadRequest, "development")

		By("a refusal names the member the client sent")
		refusedField(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{"name": " x"}), http.StatusBadRequest, "name")
		refusedField(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{"display_name": " x"}), http.StatusBadRequest, "display_name")
		m := &gatewayv1.Model{}
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "sentiment"}, m)).To(Succeed())
		Expect(m.Spec.DisplayName).To(Equal("Mood"))
	})

	It("refuses a deployment name that could name no deployment as a 400 naming the field, never a 503", func() {
		_, admin := modelWorkspace()
		for _, tc := range []struct {
			method, path string
			body         map[string]any
			field        string
		}{
			{http.MethodPost, "/v1/models", map[string]any{"id": "m", "development": "a/b"}, "development"},
			{http.MethodPost, "/v1/models", map[string]any{"id": "m", "development_deployment_id": "a/b"}, "development_deployment_id"},
			{http.MethodPost, "/v1/models", map[string]any{"id": "m", "environments": []any{map[string]any{"name": "production", "deployment": "../../x"}}}, "environments[0].deployment"},
			{http.MethodPatch, "/v1/models/sentiment", map[string]any{"development": "../../x"}, "development"},
			{http.MethodPatch, "/v1/models/sentiment", map[string]any{"environments": []any{map[string]any{"name": "staging", "deployment": "a/b"}}}, "environments[0].deployment"},
		} {
			By(fmt.Sprintf("%s %s %v", tc.method, tc.path, tc.body))
			refusedField(resttest.Call(resttest.Server, admin, tc.method, tc.path, tc.body), http.StatusBadRequest, tc.field)
		}
	})

	It("refuses a PATCH environment without a deployment, naming it, and production stays served", func() {
		ns, admin := modelWorkspace()
		for _, env := range []map[string]any{{"name": "production"}, {"name": "production", "deployment": ""}, {"name": "fresh"}} {
			By(fmt.Sprintf("%v", env))
			r := resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{
				"environments": []any{map[string]any{"name": "staging", "deployment": "v2"}, env}})
			refusedField(r, http.StatusBadRequest, "environments[1].deployment")
		}
		m := &gatewayv1.Model{}
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "sentiment"}, m)).To(Succeed())
		Expect(m.Spec.Environments).To(Equal([]gatewayv1.ModelEnvironment{{Name: "production", Deployment: "v1"}, {Name: "staging", Deployment: "v1"}}))
		r := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/models/sentiment", nil)
		Expect(r.Body).To(HaveKeyWithValue("production_deployment_id", "v1"))

		By("production moves to another deployment")
		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{
			"environments": []any{map[string]any{"name": "production", "deployment": "v2"}}})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body).To(HaveKeyWithValue("production_deployment_id", "v2"))
	})

	It("refuses an unknown team_id, duplicate members and invisible characters, naming the field", func() {
		ns, admin := modelWorkspace()
		for _, team := range []string{"nope", "Not A Team", "a/b"} {
			refusedField(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models", map[string]any{"id": "t1", "team_id": team}),
				http.StatusBadRequest, "team_id")
		}
		Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "red"},
			Spec: gatewayv1.TeamSpec{DisplayName: "Red"}})).To(Succeed())
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/models", map[string]any{"id": "t1", "team_id": "red"})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		Expect(r.Body).To(HaveKeyWithValue("team_id", "red"))

		for _, tc := range []struct{ method, path, body, field string }{
			{http.MethodPost, "/v1/models", `{"id": "d1", "id": "d2"}`, "id"},
			{http.MethodPost, "/v1/models", `{"id": "d1", "environments": [{"name": "production", "deployment": "v1", "deployment": "v2"}]}`, "environments[0].deployment"},
			{http.MethodPatch, "/v1/models/sentiment", `{"name": "A", "name": "B"}`, "name"},
		} {
			By(tc.body)
			refusedField(resttest.Call(resttest.Server, admin, tc.method, tc.path, tc.body), http.StatusBadRequest, tc.field)
		}

		for _, text := range []string{"Mood\u202Egnp.exe", "Mo\u200Bod", "Mood\u00A0Ring", "\uFEFFMood"} {
			By(fmt.Sprintf("%q", text))
			refusedField(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/models/sentiment", map[string]any{"name": text}), http.StatusBadRequest, "name")
		}
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "d1"}, &gatewayv1.Model{})).NotTo(Succeed())
	})
})
