package endpoints_test

import (
	"net/http"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

var _ = Describe("Endpoints", func() {
	It("creates, lists, gets, updates and deletes endpoints; a taken slug is a 409", func() {
		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		body := map[string]any{"slug": "demo/echo", "targets": []any{map[string]any{
			"provider": "OPENAI", "base_url": "http://127.0.0.1:9999/v1", "target_model": "echo",
			"api_key_secret_ref": map[string]any{"name": "upstream", "key": "api_key"},
		}}}
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/endpoints", body)
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.Conform("Endpoint", r.Raw)
		id := r.Body["id"].(string)
		Expect(id).To(MatchRegexp(`^ep-[0-9a-z]{16}$`))
		Expect(r.Body["slug"]).To(Equal("demo/echo"))
		Expect(slices.ContainsFunc(resttest.MustSnapshot(ns).Endpoints, func(e snapshot.Endpoint) bool { return e.ID == id })).To(BeTrue())

		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/endpoints", body), http.StatusConflict, "conflict")

		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/endpoints", nil)
		Expect(r.Code).To(Equal(http.StatusOK))
		resttest.Conform("EndpointPage", r.Raw)
		Expect(r.Body["items"]).To(HaveLen(1))

		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/endpoints/"+id, map[string]any{"targets": []any{map[string]any{
			"provider": "OPENAI", "base_url": "http://127.0.0.1:9998/v1",
		}}, "timeout_ms": 1500})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Endpoint", r.Raw)
		Expect(r.Body["targets"]).To(Equal([]any{map[string]any{"provider": "OPENAI", "base_url": "http://127.0.0.1:9998/v1"}}))
		Expect(r.Body["timeout_ms"]).To(Equal(1500.0))
		s := resttest.MustSnapshot(ns)
		Expect(s.Endpoints).To(HaveLen(1))
		Expect(s.Endpoints[0].Targets[0].BaseURL).To(Equal("http://127.0.0.1:9998/v1"))

		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/endpoints/"+id, map[string]any{"slug": "x"}), http.StatusBadRequest, "invalid_request")
		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/endpoints/"+id, map[string]any{"targets": []any{map[string]any{
			"provider": "OPENAI", "base_url": "ftp://nope",
		}}})
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["error"]).To(ContainSubstring("base_url"))

		r = resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/gateway/endpoints/"+id, nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("DeletedEndpoint", r.Raw)
		Expect(resttest.MustSnapshot(ns).Endpoints).To(BeEmpty())
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/endpoints/"+id, nil), http.StatusNotFound, "not_found")
	})
})

var _ = Describe("Endpoint upstream hosts", func() {
	It("refuses a base_url whose host the upstream Secret does not list, naming targets[0].base_url and the rule", func() {
		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		Expect(resttest.Client.Create(resttest.Ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "provider",
			Labels:      map[string]string{gatewayv1.LabelUpstreamCredential: "true"},
			Annotations: map[string]string{gatewayv1.AnnotationUpstreamHosts: "api.example.com"}},
			StringData: map[string]string{"api_key": "sk-provider"}})).To(Succeed())
		target := func(base string) []any {
			return []any{map[string]any{"provider": "OPENAI", "base_url": base, "api_key_secret_ref": map[string]any{"name": "provider"}}}
		}
		const rule = "may be sent only to the hosts its annotation " + gatewayv1.AnnotationUpstreamHosts + " lists"
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/endpoints", map[string]any{"slug": "x/stolen", "targets": target("https://attacker.example.org/v1")})
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Raw).To(ContainSubstring(`"field":"targets[0].base_url"`))
		Expect(r.Raw).To(ContainSubstring(rule))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/endpoints", map[string]any{"slug": "x/home", "targets": target("https://api.example.com/v1")})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/endpoints/"+r.Body["id"].(string), map[string]any{"targets": target("https://attacker.example.org/v1")})
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Raw).To(ContainSubstring(`"field":"targets[0].base_url"`))
		Expect(r.Raw).To(ContainSubstring(rule))
	})
})
