package groups_test

import (
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
	"github.com/modelgate/modelgate/test/apibody"
)

// The dashboard checks a write with ?dry_run=true before it makes it: the API server's dryRun=All, so every
// admission webhook and CEL rule judges it, and nothing is stored.
var _ = Describe("Group dry runs", Ordered, func() {
	var ns, admin string
	var root map[string]any

	groupsWithExt := func(ext string) []gatewayv1.Group {
		var list gatewayv1.GroupList
		Expect(resttest.Client.List(resttest.Ctx, &list, client.InNamespace(ns), client.MatchingFields{gatewayv1.FieldGroupExternalID: ext})).To(Succeed())
		return list.Items
	}
	rpm := func(n int) map[string]any {
		return apibody.Model("demo/echo", []map[string]any{apibody.Limit("REQUEST", "MINUTE", n)}, nil)
	}

	BeforeAll(func() {
		ns, admin = resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("dry-root", "CASCADING", nil, rpm(100)))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		root = r.Body
	})

	It("refuses a child above its parent in the webhook's words, and stores nothing", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups?dry_run=true", apibody.Group("dry-child", "", root["id"], rpm(200)))
		Expect(r.Code).To(Equal(http.StatusBadRequest), "%s", r)
		Expect(r.Body["error"]).To(Equal(cascadeMsg))
		Expect(r.Body["error_code"]).To(Equal("child_exceeds_parent_limit"))
		Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", "models[0].rate_limits[0].threshold")))
		Expect(groupsWithExt("dry-child")).To(BeEmpty())
	})

	It("answers the group a valid create would make, without making it", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups?dry_run=true", apibody.Group("dry-child", "", root["id"], rpm(50)))
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Group", r.Raw)
		Expect(r.Body["hierarchy"]).To(HaveKeyWithValue("parent_group_id", root["id"]))
		Expect(groupsWithExt("dry-child")).To(BeEmpty())
	})

	It("answers a PATCH as it would be, and leaves the group as it was", func() {
		id := root["id"].(string)
		r := resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/groups/"+id+"?dry_run=true", map[string]any{"models": []map[string]any{rpm(300)}})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body["models"].([]any)[0].(map[string]any)["rate_limits"]).To(ConsistOf(HaveKeyWithValue("threshold", 300.0)))
		var g gatewayv1.Group
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: id}, &g)).To(Succeed())
		Expect(g.Spec.Models[0].RateLimits[0].Threshold).To(Equal(int64(100)))
		got := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups/"+id, nil)
		Expect(got.Body["models"].([]any)[0].(map[string]any)["rate_limits"]).To(ConsistOf(HaveKeyWithValue("threshold", 100.0)))
	})

	It("refuses a dry_run that is neither true nor false", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/groups/"+root["id"].(string)+"?dry_run=yes", map[string]any{"models": []map[string]any{rpm(300)}})
		Expect(r.Code).To(Equal(http.StatusBadRequest), "%s", r)
		Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", "dry_run")))
	})
})
