package endpoints_test

import (
	"fmt"
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
		Expect(r.Body["targets"]).To(Equal([]any{map[string]any{"name": "target-0", "provider": "OPENAI", "base_url": "http://127.0.0.1:9998/v1",
			"weight": 1.0, "priority": 0.0}}))
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

var _ = Describe("Endpoints of several targets", func() {
	twoTargets := func() []any {
		return []any{
			map[string]any{"name": "vllm-a", "provider": "OPENAI", "base_url": "http://127.0.0.1:9001/v1", "target_model": "llama",
				"weight": 3, "pricing": map[string]any{"input_per_million_tokens": "0.60", "output_per_million_tokens": "0.80"}},
			map[string]any{"provider": "OPENAI", "base_url": "http://127.0.0.1:9002/v1", "priority": 1},
		}
	}

	It("creates and answers every field, publishes them, and PATCH replaces the targets, retry and cooldown", func() {
		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/endpoints", map[string]any{
			"slug": "chat/llama", "targets": twoTargets(),
			"retry":    map[string]any{"attempts": 2, "on_status": []any{429, 503}},
			"cooldown": map[string]any{"failures": 3, "duration_ms": 30000}})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.Conform("Endpoint", r.Raw)
		id := r.Body["id"].(string)
		want := map[string]any{
			"targets": []any{
				map[string]any{"name": "vllm-a", "provider": "OPENAI", "base_url": "http://127.0.0.1:9001/v1", "target_model": "llama",
					"weight": 3.0, "priority": 0.0, "pricing": map[string]any{"input_per_million_tokens": "0.60", "output_per_million_tokens": "0.80"}},
				map[string]any{"name": "target-1", "provider": "OPENAI", "base_url": "http://127.0.0.1:9002/v1", "weight": 1.0, "priority": 1.0},
			},
			"retry":    map[string]any{"attempts": 2.0, "on_status": []any{429.0, 503.0}},
			"cooldown": map[string]any{"failures": 3.0, "duration_ms": 30000.0},
		}
		for k, v := range want {
			Expect(r.Body).To(HaveKeyWithValue(k, v))
		}
		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/endpoints/"+id, nil)
		for k, v := range want {
			Expect(r.Body).To(HaveKeyWithValue(k, v))
		}
		two := int32(2)
		Expect(resttest.MustSnapshot(ns).Endpoints).To(Equal([]snapshot.Endpoint{{ID: id, Slug: "chat/llama",
			Targets: []snapshot.Target{
				{Name: "vllm-a", Provider: "OPENAI", BaseURL: "http://127.0.0.1:9001/v1", TargetModel: "llama", Weight: 3,
					Pricing: &snapshot.Pricing{InputPerMillionTokens: "0.60", OutputPerMillionTokens: "0.80"}},
				{Name: "target-1", Provider: "OPENAI", BaseURL: "http://127.0.0.1:9002/v1", Weight: 1, Priority: 1},
			},
			Retry: &snapshot.Retry{Attempts: &two, OnStatus: []int32{429, 503}}, Cooldown: &snapshot.Cooldown{Failures: 3, DurationMillis: 30000}}}))

		// Only the second target's weight changes: the answer waits for the snapshot that carries it, though the
		// first target is as it was.
		targets := twoTargets()
		targets[1].(map[string]any)["weight"] = 7
		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/endpoints/"+id, map[string]any{"targets": targets})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(resttest.MustSnapshot(ns).Endpoints[0].Targets[1].Weight).To(Equal(int32(7)))

		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/endpoints/"+id, map[string]any{"retry": map[string]any{}, "cooldown": map[string]any{}})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body).NotTo(HaveKey("retry"))
		Expect(r.Body).NotTo(HaveKey("cooldown"))
		s := resttest.MustSnapshot(ns).Endpoints[0]
		Expect(s.Retry).To(BeNil())
		Expect(s.Cooldown).To(BeNil())
		Expect(s.Targets).To(HaveLen(2))
	})

	It("answers an Endpoint written before targets had names, weights or priorities with the defaults, and takes it back unchanged", func() {
		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		old := &gatewayv1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ep-legacy"}, Spec: gatewayv1.EndpointSpec{
			Slug: "demo/old", Targets: []gatewayv1.EndpointTarget{{Provider: gatewayv1.ProviderOpenAI, BaseURL: "http://127.0.0.1:9003/v1", TargetModel: "echo"}}}}
		Expect(resttest.Client.Create(resttest.Ctx, old)).To(Succeed())
		Eventually(func() []snapshot.Endpoint { return resttest.MustSnapshot(ns).Endpoints }).Should(HaveLen(1))
		before := resttest.MustSnapshot(ns).Endpoints[0]
		Expect(before.Targets).To(Equal([]snapshot.Target{{Name: "target-0", Provider: "OPENAI", BaseURL: "http://127.0.0.1:9003/v1", TargetModel: "echo", Weight: 1}}))
		Expect(before.Retry).To(BeNil())
		Expect(before.Cooldown).To(BeNil())

		r := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/endpoints/ep-legacy", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Endpoint", r.Raw)
		Expect(r.Body["targets"]).To(Equal([]any{map[string]any{"name": "target-0", "provider": "OPENAI",
			"base_url": "http://127.0.0.1:9003/v1", "target_model": "echo", "weight": 1.0, "priority": 0.0}}))
		Expect(r.Body).NotTo(HaveKey("retry"))
		Expect(r.Body).NotTo(HaveKey("cooldown"))

		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/endpoints/ep-legacy", map[string]any{"targets": r.Body["targets"]})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(resttest.MustSnapshot(ns).Endpoints[0]).To(Equal(before))
	})

	DescribeTable("refuses a bad endpoint with 400 naming the field and the rule",
		func(mutate func(body map[string]any), field, rule string) {
			_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
			body := map[string]any{"slug": "chat/bad", "targets": twoTargets()}
			mutate(body)
			r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/endpoints", body)
			resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.Raw).To(ContainSubstring(`"field":"` + field + `"`))
			Expect(r.Body["error"]).To(ContainSubstring(rule))
		},
		Entry("no targets", func(b map[string]any) { b["targets"] = []any{} }, "targets", "1 to 16 targets"),
		Entry("17 targets", func(b map[string]any) {
			var ts []any
			for i := range 17 {
				ts = append(ts, map[string]any{"provider": "OPENAI", "base_url": fmt.Sprintf("http://127.0.0.1:%d/v1", 9100+i)})
			}
			b["targets"] = ts
		}, "targets", "1 to 16 targets"),
		Entry("a repeated name", func(b map[string]any) { target(b, 1)["name"] = "vllm-a" }, "targets[1].name", "must be unique"),
		Entry("a name equal to another target's default name", func(b map[string]any) {
			target(b, 0)["name"] = "target-1"
		}, "targets[1].name", `already called "target-1"`),
		Entry("an upper-case name", func(b map[string]any) { target(b, 0)["name"] = "VLLM" }, "targets[0].name", "DNS-1123 label"),
		Entry("weight 0", func(b map[string]any) { target(b, 1)["weight"] = 0 }, "targets[1].weight", "from 1 to 1000"),
		Entry("weight 1001", func(b map[string]any) { target(b, 0)["weight"] = 1001 }, "targets[0].weight", "from 1 to 1000"),
		Entry("priority 10", func(b map[string]any) { target(b, 1)["priority"] = 10 }, "targets[1].priority", "from 0 to 9"),
		Entry("priority -1", func(b map[string]any) { target(b, 1)["priority"] = -1 }, "targets[1].priority", "from 0 to 9"),
		Entry("an unknown provider", func(b map[string]any) { target(b, 1)["provider"] = "COHERE" }, "targets[1].provider", "must be one of OPENAI, AZURE_OPENAI, ANTHROPIC"),
		Entry("an AZURE_OPENAI target without api_version", func(b map[string]any) { target(b, 1)["provider"] = "AZURE_OPENAI" }, "targets[1].api_version", "required on an AZURE_OPENAI target"),
		Entry("api_version on an OPENAI target", func(b map[string]any) { target(b, 0)["api_version"] = "2024-10-21" }, "targets[0].api_version", "only by an AZURE_OPENAI target"),
		Entry("region on an OPENAI target", func(b map[string]any) { target(b, 1)["region"] = "us-east-1" }, "targets[1].region", "only by a BEDROCK target"),
		Entry("a BEDROCK target without region", func(b map[string]any) { target(b, 1)["provider"] = "BEDROCK" }, "targets[1].region", "required on a BEDROCK target"),
		Entry("a price with seven places", func(b map[string]any) {
			target(b, 0)["pricing"] = map[string]any{"input_per_million_tokens": "0.0000001"}
		}, "targets[0].pricing.input_per_million_tokens", "at most 6 places"),
		Entry("a negative price", func(b map[string]any) {
			target(b, 0)["pricing"] = map[string]any{"output_per_million_tokens": "-1"}
		}, "targets[0].pricing.output_per_million_tokens", "non-negative"),
		Entry("6 retry attempts", func(b map[string]any) { b["retry"] = map[string]any{"attempts": 6} }, "retry.attempts", "from 0 to 5"),
		Entry("a retry status of 399", func(b map[string]any) { b["retry"] = map[string]any{"on_status": []any{429, 399}} }, "retry.on_status[1]", "from 400 to 599"),
		Entry("a retry status of 600", func(b map[string]any) { b["retry"] = map[string]any{"on_status": []any{600}} }, "retry.on_status[0]", "from 400 to 599"),
		Entry("a repeated retry status", func(b map[string]any) { b["retry"] = map[string]any{"on_status": []any{503, 503}} }, "retry.on_status[1]", "repeats"),
		Entry("cooldown failures 0", func(b map[string]any) { b["cooldown"] = map[string]any{"failures": 0} }, "cooldown.failures", "from 1 to 100"),
		Entry("cooldown failures 101", func(b map[string]any) { b["cooldown"] = map[string]any{"failures": 101} }, "cooldown.failures", "from 1 to 100"),
		Entry("a cooldown of 999 ms", func(b map[string]any) { b["cooldown"] = map[string]any{"duration_ms": 999} }, "cooldown.duration_ms", "from 1000 (1s) to 3600000 (1h)"),
		Entry("a cooldown of over an hour", func(b map[string]any) { b["cooldown"] = map[string]any{"duration_ms": 3600001} }, "cooldown.duration_ms", "from 1000 (1s) to 3600000 (1h)"),
	)
})

// target is the i-th target of a request body.
func target(body map[string]any, i int) map[string]any {
	return body["targets"].([]any)[i].(map[string]any)
}
