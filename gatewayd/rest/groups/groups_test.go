package groups_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
	"github.com/modelgate/modelgate/test/apibody"
)

const cascadeMsg = "Child group exceeds parent group limit."

var _ = Describe("Groups", Ordered, func() {
	var ns, admin string
	var root, child, grandchild map[string]any

	BeforeAll(func() {
		ns, admin = resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
	})

	groupInSnapshot := func(id string) *snapshot.Group {
		for _, g := range resttest.MustSnapshot(ns).Groups {
			if g.ID == id {
				return &g
			}
		}
		return nil
	}

	It("creates a CASCADING root with a service-assigned id and resolved effective models", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-root", "CASCADING", nil,
			apibody.Model("demo/echo", []map[string]any{apibody.Limit("REQUEST", "MINUTE", 100)}, []map[string]any{apibody.Limit("TOKEN", "DAY", 1000)})))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.Conform("Group", r.Raw)
		root = r.Body
		Expect(root["id"]).To(MatchRegexp(`^grp-[0-9a-z]{16}$`))
		Expect(root["metadata"]).To(Equal(map[string]any{"name": "Name cust-root", "external_entity_id": "cust-root"}))
		Expect(root["hierarchy"]).To(Equal(map[string]any{"limit_enforcement": "CASCADING", "parent_group_id": nil}))
		_, err := time.Parse(time.RFC3339, root["created_at"].(string))
		Expect(err).NotTo(HaveOccurred())
		eff := root["effective_models"].([]any)[0].(map[string]any)
		Expect(eff["rate_limits"]).To(ConsistOf(map[string]any{"type": "REQUEST", "unit": "MINUTE", "threshold": 100.0, "source_group": root["id"]}))
		Expect(eff["usage_limits"]).To(ConsistOf(map[string]any{"type": "TOKEN", "unit": "DAY", "threshold": 1000.0, "source_group": root["id"]}))

		By("being in the snapshot as soon as the call returns (read-your-writes)")
		Expect(groupInSnapshot(root["id"].(string))).NotTo(BeNil())

		By("being the same custom resource kubectl would create")
		var g gatewayv1.Group
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: root["id"].(string)}, &g)).To(Succeed())
		Expect(g.Spec.ExternalEntityID).To(Equal("cust-root"))
		Expect(g.Spec.DisplayName).To(Equal("Name cust-root"))
	})

	It("creates a child that inherits the root's mode, and a grandchild; cascading lists every ancestor limit", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-child", "", root["id"],
			apibody.Model("demo/echo", []map[string]any{apibody.Limit("REQUEST", "MINUTE", 50)}, nil)))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		child = r.Body
		Expect(child["hierarchy"]).To(Equal(map[string]any{"limit_enforcement": "CASCADING", "parent_group_id": root["id"]}))
		eff := child["effective_models"].([]any)[0].(map[string]any)
		Expect(eff["rate_limits"]).To(ConsistOf(
			map[string]any{"type": "REQUEST", "unit": "MINUTE", "threshold": 50.0, "source_group": child["id"]},
			map[string]any{"type": "REQUEST", "unit": "MINUTE", "threshold": 100.0, "source_group": root["id"]},
		))
		Expect(eff["usage_limits"]).To(ConsistOf(map[string]any{"type": "TOKEN", "unit": "DAY", "threshold": 1000.0, "source_group": root["id"]}))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-grandchild", "CASCADING", child["id"],
			apibody.Model("demo/echo", nil, nil)))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		grandchild = r.Body
		Expect(grandchild["effective_models"].([]any)[0].(map[string]any)["usage_limits"]).To(HaveLen(1))
		Expect(grandchild["models"].([]any)[0]).To(Equal(map[string]any{"slug": "demo/echo", "rate_limits": []any{}, "usage_limits": []any{}}))
	})

	It("refuses a child above its ancestor's threshold, and an ancestor lowered below a child, with the exact message", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-greedy", "CASCADING", root["id"],
			apibody.Model("demo/echo", []map[string]any{apibody.Limit("REQUEST", "MINUTE", 500)}, nil)))
		resttest.ExpectError(r, http.StatusBadRequest, "child_exceeds_parent_limit")
		Expect(r.Body["error"]).To(Equal(cascadeMsg))
		Expect(r.Raw).To(ContainSubstring("models[0].rate_limits[0].threshold"))

		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/groups/"+root["id"].(string), map[string]any{
			"models": []any{apibody.Model("demo/echo", []map[string]any{apibody.Limit("REQUEST", "MINUTE", 10)}, nil)},
		})
		resttest.ExpectError(r, http.StatusBadRequest, "child_exceeds_parent_limit")
		Expect(r.Body["error"]).To(Equal(cascadeMsg))
	})

	It("refuses a sixth level", func() {
		parent := grandchild["id"]
		for i := 4; i <= 5; i++ {
			r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group(fmt.Sprintf("cust-level%d", i), "CASCADING", parent, apibody.Model("demo/echo", nil, nil)))
			Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
			parent = r.Body["id"]
		}
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-level6", "CASCADING", parent, apibody.Model("demo/echo", nil, nil)))
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["error"]).To(ContainSubstring("hierarchy.parent_group_id"))
		Expect(r.Body["error"]).To(ContainSubstring("at most 5 levels"))
	})

	It("refuses a mode different from the root's", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-indep", "INDEPENDENT", root["id"], apibody.Model("demo/echo", nil, nil)))
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["error"]).To(ContainSubstring("hierarchy.limit_enforcement"))
	})

	It("answers 404 for an unknown parent, 400 for missing models or external id, 409 for a taken external id", func() {
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-orphan", "", "grp-doesnotexist00", apibody.Model("a", nil, nil))),
			http.StatusNotFound, "not_found")
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-empty", "", nil))
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Raw).To(ContainSubstring(`"field":"models"`))
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", map[string]any{"models": []any{apibody.Model("a", nil, nil)}})
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Raw).To(ContainSubstring("metadata.external_entity_id"))
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-root", "", nil, apibody.Model("a", nil, nil)))
		resttest.ExpectError(r, http.StatusConflict, "conflict")
		Expect(r.Body["error"]).To(ContainSubstring("metadata.external_entity_id"))
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-bad-unit", "", nil,
			apibody.Model("a", []map[string]any{apibody.Limit("REQUEST", "DAY", 5)}, nil)))
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["error"]).To(ContainSubstring("rate_limits"))
	})

	It("looks a group up by external id", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups?external_entity_id=cust-child", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("GroupPage", r.Raw)
		Expect(r.Body["items"]).To(HaveLen(1))
		Expect(r.Body["items"].([]any)[0].(map[string]any)["id"]).To(Equal(child["id"]))
		Expect(r.Body["pagination"]).To(Equal(map[string]any{"has_more": false, "cursor": nil}))

		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups?external_entity_id=nobody", nil)
		Expect(r.Body["items"]).To(BeEmpty())
	})

	It("PATCHes models with set semantics and revokes removed slugs from the snapshot at once", func() {
		path := "/v1/gateway/groups/" + child["id"].(string)
		r := resttest.Call(resttest.Server, admin, http.MethodPatch, path, map[string]any{"models": []any{
			apibody.Model("demo/echo", []map[string]any{apibody.Limit("REQUEST", "MINUTE", 40)}, nil), apibody.Model("other/slug", nil, nil),
		}})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("Group", r.Raw)
		Expect(slugs(r.Body["models"])).To(Equal([]string{"demo/echo", "other/slug"}))
		Expect(slugs(r.Body["effective_models"])).To(Equal([]string{"demo/echo", "other/slug"}))

		r = resttest.Call(resttest.Server, admin, http.MethodPatch, path, map[string]any{"models": []any{apibody.Model("other/slug", nil, nil)}})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(slugs(r.Body["models"])).To(Equal([]string{"other/slug"}))
		g := groupInSnapshot(child["id"].(string))
		Expect(g).NotTo(BeNil())
		Expect(g.Models).To(HaveLen(1))
		Expect(g.Models[0].Slug).To(Equal("other/slug"))

		r = resttest.Call(resttest.Server, admin, http.MethodPatch, path, map[string]any{"metadata": map[string]any{"name": "Renamed"}})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body["metadata"].(map[string]any)["name"]).To(Equal("Renamed"))
		Expect(slugs(r.Body["models"])).To(Equal([]string{"other/slug"}), "a name-only PATCH keeps the models")

		r = resttest.Call(resttest.Server, admin, http.MethodPatch, path, map[string]any{"models": []any{}})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body["models"]).To(BeEmpty())
		Expect(r.Body["effective_models"]).To(BeEmpty())
		Expect(groupInSnapshot(child["id"].(string)).Models).To(BeEmpty())
	})

	It("refuses a PATCH without metadata.name or models, and any change of hierarchy", func() {
		path := "/v1/gateway/groups/" + child["id"].(string)
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPatch, path, map[string]any{}), http.StatusBadRequest, "invalid_request")
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPatch, path, map[string]any{"metadata": map[string]any{}}), http.StatusBadRequest, "invalid_request")
		r := resttest.Call(resttest.Server, admin, http.MethodPatch, path, map[string]any{"hierarchy": map[string]any{"parent_group_id": nil}, "models": []any{}})
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["error"]).To(ContainSubstring("hierarchy is immutable"))
		By("hierarchy: null is a hierarchy too")
		r = resttest.Call(resttest.Server, admin, http.MethodPatch, path, `{"hierarchy": null, "models": []}`)
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", "hierarchy")), "%s", r)
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/groups/grp-missing0000000", map[string]any{"models": []any{}}),
			http.StatusNotFound, "not_found")
	})

	It("refuses duplicate members, a parameter given twice and invisible characters, naming the field", func() {
		refused := func(r resttest.Response, field string) {
			GinkgoHelper()
			resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", field)), "%s", r)
		}
		path := "/v1/gateway/groups/" + child["id"].(string)
		refused(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups",
			`{"metadata": {"external_entity_id": "dup-1", "external_entity_id": "dup-2"}, "models": [{"slug": "demo/echo"}]}`), "metadata.external_entity_id")
		refused(resttest.Call(resttest.Server, admin, http.MethodPatch, path, `{"models": [{"slug": "a", "slug": "b"}]}`), "models[0].slug")
		refused(resttest.Call(resttest.Server, admin, http.MethodPatch, path, `{"models": [], "models": [{"slug": "demo/echo"}]}`), "models")

		for q, field := range map[string]string{
			"external_entity_id=cust-child&external_entity_id=cust-root": "external_entity_id",
			"limit=1&limit=2":   "limit",
			"cursor=a&cursor=b": "cursor",
		} {
			By(q)
			refused(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups?"+q, nil), field)
		}
		refused(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups?dry_run=true&dry_run=false",
			map[string]any{"metadata": map[string]any{"external_entity_id": "dry-1"}, "models": []any{map[string]any{"slug": "demo/echo"}}}), "dry_run")

		for _, text := range []string{"cust\u202Egpj.exe", "cu\u200Bst", "cust\u00A0one", "\uFEFFcust", "cust\u2066x\u2069"} {
			By(text)
			refused(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups",
				`{"metadata": {"external_entity_id": "`+text+`"}, "models": [{"slug": "demo/echo"}]}`), "metadata.external_entity_id")
			refused(resttest.Call(resttest.Server, admin, http.MethodPatch, path, `{"metadata": {"name": "`+text+`"}}`), "metadata.name")
		}
		Expect(groupInSnapshot(child["id"].(string))).NotTo(BeNil())
	})

	It("gets one group, and answers 404 for an unknown id and 400 for an invalid one", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups/"+root["id"].(string), nil)
		Expect(r.Code).To(Equal(http.StatusOK))
		resttest.Conform("Group", r.Raw)
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups/grp-missing0000000", nil), http.StatusNotFound, "not_found")
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups/Not_A_Valid_ID", nil), http.StatusBadRequest, "invalid_request")
	})

	It("deletes a group with its subtree and keys, and frees the external id at once", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups/"+grandchild["id"].(string)+"/api_keys", map[string]any{"name": "gc"})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)

		r = resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/gateway/groups/"+root["id"].(string), nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("DeletedGroup", r.Raw)
		Expect(r.Body["id"]).To(Equal(root["id"]))
		Expect(r.Body["metadata"]).To(Equal(map[string]any{"name": "Name cust-root", "external_entity_id": "cust-root"}))
		Expect(groupInSnapshot(root["id"].(string))).To(BeNil())

		By("freeing the external id for immediate reuse")
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-root", "", nil, apibody.Model("demo/echo", nil, nil)))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)

		By("removing descendants and their keys")
		for _, id := range []any{child["id"], grandchild["id"]} {
			Eventually(func() int {
				return resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups/"+id.(string), nil).Code
			}).WithTimeout(30 * time.Second).Should(Equal(http.StatusNotFound))
		}
		Eventually(func() []gatewayv1.APIKey {
			var keys gatewayv1.APIKeyList
			Expect(resttest.Client.List(resttest.Ctx, &keys, client.InNamespace(ns))).To(Succeed())
			return keys.Items
		}).WithTimeout(30 * time.Second).Should(BeEmpty())
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/gateway/groups/"+root["id"].(string), nil), http.StatusNotFound, "not_found")
	})
})

var _ = Describe("Group pagination", func() {
	It("returns every group that exists for the whole drain exactly once while others come and go", func() {
		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		mk := func(name string) {
			g := &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			g.Spec.ExternalEntityID = "ext-" + name
			g.Spec.Models = []gatewayv1.ModelConfig{{Slug: "demo/echo"}}
			Expect(resttest.Client.Create(resttest.Ctx, g)).To(Succeed())
		}
		del := func(name string) {
			Expect(resttest.Client.Delete(resttest.Ctx, &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
		}
		var stable []string
		for i := range 30 {
			name := fmt.Sprintf("g-%02d", i)
			mk(name)
			if i%5 != 0 {
				stable = append(stable, name) // every fifth group is deleted during the drain
			}
		}

		seen := map[string]int{}
		cursor, pages := "", 0
		for {
			q := url.Values{"limit": {"7"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			r := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups?"+q.Encode(), nil)
			Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
			resttest.Conform("GroupPage", r.Raw)
			for _, it := range r.Body["items"].([]any) {
				seen[it.(map[string]any)["id"].(string)]++
			}
			Expect(len(r.Body["items"].([]any))).To(BeNumerically("<=", 7))
			p := r.Body["pagination"].(map[string]any)
			// Churn between pages: new groups before and after the cursor, deletions on both sides.
			mk(fmt.Sprintf("a-new-%d", pages))
			mk(fmt.Sprintf("z-new-%d", pages))
			if pages*5 < 30 {
				del(fmt.Sprintf("g-%02d", pages*5))
			}
			pages++
			if p["has_more"] == false {
				Expect(p["cursor"]).To(BeNil())
				break
			}
			Expect(p["cursor"]).NotTo(BeNil())
			cursor = p["cursor"].(string)
			Expect(pages).To(BeNumerically("<", 50))
		}
		for _, name := range stable {
			Expect(seen).To(HaveKeyWithValue(name, 1), "group %s", name)
		}
		for name, n := range seen {
			Expect(n).To(Equal(1), "group %s returned %d times", name, n)
		}
	})

	It("refuses a bad limit or cursor", func() {
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		for _, q := range []string{"limit=0", "limit=1001", "limit=abc", "cursor=not-a-cursor", "cursor=" + url.QueryEscape("!!!")} {
			resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups?"+q, nil), http.StatusBadRequest, "invalid_request")
		}
		r := resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups?limit=1000", nil)
		Expect(r.Code).To(Equal(http.StatusOK))
		Expect(r.Body["items"]).To(BeEmpty())
		Expect(r.Body["pagination"]).To(Equal(map[string]any{"has_more": false, "cursor": nil}))
	})
})

// usageByGroup answers each group's counters from a table, so a test sees which group's counter was read.
type usageByGroup map[string]int64

func (u usageByGroup) Usage(_ context.Context, _, group, _, _, _ string, _ time.Time) (int64, error) {
	return u[group], nil
}

var _ = Describe("Group usage", func() {
	It("reports the group's own DAY limits with current usage and the next UTC midnight", func() {
		now := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
		srv := resttest.Serve(rest.Options{Usage: resttest.FixedUsage{N: 42}, Clock: func() time.Time { return now }})
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		r := resttest.Call(srv, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-usage", "", nil,
			apibody.Model("demo/echo", []map[string]any{apibody.Limit("REQUEST", "MINUTE", 10)}, []map[string]any{apibody.Limit("TOKEN", "DAY", 5000), apibody.Limit("REQUEST", "DAY", 100)}),
			apibody.Model("no/usage", nil, nil)))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		id := r.Body["id"].(string)

		r = resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/"+id+"/usage", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("GroupUsage", r.Raw)
		var got struct {
			GroupID          string                      `json:"group_id"`
			ExternalEntityID string                      `json:"external_entity_id"`
			Usage            map[string][]map[string]any `json:"usage"`
		}
		Expect(json.Unmarshal(r.Raw, &got)).To(Succeed())
		Expect(got.GroupID).To(Equal(id))
		Expect(got.ExternalEntityID).To(Equal("cust-usage"))
		Expect(got.Usage).To(HaveLen(1), "only slugs with usage limits appear")
		Expect(got.Usage["demo/echo"]).To(ConsistOf(
			map[string]any{"type": "TOKEN", "unit": "DAY", "threshold": 5000.0, "current_usage": 42.0, "reset_at": "2026-03-15T00:00:00Z", "source_group": id},
			map[string]any{"type": "REQUEST", "unit": "DAY", "threshold": 100.0, "current_usage": 42.0, "reset_at": "2026-03-15T00:00:00Z", "source_group": id},
		))
	})

	It("reports inherited DAY limits with their source group and the counter each one charges", func() {
		now := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		create := func(srv *httptest.Server, ext, mode string, parent any, models ...map[string]any) string {
			GinkgoHelper()
			r := resttest.Call(srv, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group(ext, mode, parent, models...))
			Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
			return r.Body["id"].(string)
		}
		usageOf := func(srv *httptest.Server, id string) []map[string]any {
			GinkgoHelper()
			r := resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/"+id+"/usage", nil)
			Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
			resttest.Conform("GroupUsage", r.Raw)
			var got struct {
				Usage map[string][]map[string]any `json:"usage"`
			}
			Expect(json.Unmarshal(r.Raw, &got)).To(Succeed())
			return got.Usage["demo/echo"]
		}
		counters := usageByGroup{}
		srv := resttest.Serve(rest.Options{Usage: counters, Clock: func() time.Time { return now }})
		daily := apibody.Model("demo/echo", nil, []map[string]any{apibody.Limit("REQUEST", "DAY", 20)})

		By("INDEPENDENT: the child meters its own counter against the parent's threshold")
		parent := create(srv, "usage-ind-parent", "INDEPENDENT", nil, daily)
		child := create(srv, "usage-ind-child", "INDEPENDENT", parent, apibody.Model("demo/echo", nil, nil))
		counters[parent], counters[child] = 3, 20
		Expect(usageOf(srv, child)).To(ConsistOf(map[string]any{"type": "REQUEST", "unit": "DAY", "threshold": 20.0,
			"current_usage": 20.0, "reset_at": "2026-03-15T00:00:00Z", "source_group": parent}))

		By("CASCADING: the child's calls charge the parent's shared pool")
		root := create(srv, "usage-cas-root", "CASCADING", nil, daily)
		leaf := create(srv, "usage-cas-leaf", "CASCADING", root, apibody.Model("demo/echo", nil, []map[string]any{apibody.Limit("REQUEST", "DAY", 5)}))
		counters[root], counters[leaf] = 17, 4
		Expect(usageOf(srv, leaf)).To(ConsistOf(
			map[string]any{"type": "REQUEST", "unit": "DAY", "threshold": 5.0, "current_usage": 4.0, "reset_at": "2026-03-15T00:00:00Z", "source_group": leaf},
			map[string]any{"type": "REQUEST", "unit": "DAY", "threshold": 20.0, "current_usage": 17.0, "reset_at": "2026-03-15T00:00:00Z", "source_group": root},
		))
	})
})

func slugs(v any) []string {
	var out []string
	for _, m := range v.([]any) {
		out = append(out, m.(map[string]any)["slug"].(string))
	}
	slices.Sort(out)
	return out
}

var _ = Describe("Concurrent PATCHes of one group", func() {
	It("apply every one and answer 200, never a conflict in the API server's words, over 20 races", func() {
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-patch-race", "", nil, apibody.Model("demo/echo", nil, nil)))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		id := r.Body["id"].(string)
		for trial := range 20 {
			codes := make(chan resttest.Response, 20)
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer GinkgoRecover()
					codes <- resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/groups/"+id,
						map[string]any{"metadata": map[string]any{"name": fmt.Sprintf("name %d-%d", trial, i)}})
				}()
			}
			wg.Wait()
			close(codes)
			for r := range codes {
				Expect(r.Code).To(Equal(http.StatusOK), "trial %d: %s", trial, r)
			}
		}
	})
})

var _ = Describe("Concurrent creates with one external id", func() {
	It("answer one 201 and 409 to every other caller, so no answered group goes unserved", func() {
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		codes := make(chan resttest.Response, 20)
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer GinkgoRecover()
				codes <- resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-contested", "", nil, apibody.Model("demo/echo", nil, nil)))
			}()
		}
		wg.Wait()
		close(codes)
		created, conflicts := 0, 0
		for r := range codes {
			switch r.Code {
			case http.StatusCreated:
				created++
			case http.StatusConflict:
				conflicts++
				Expect(r.Body["error_code"]).To(Equal("conflict"), "%s", r)
			default:
				Fail(fmt.Sprintf("unexpected answer %s", r))
			}
		}
		Expect([]int{created, conflicts}).To(Equal([]int{1, 19}))
	})
})

// countingLister answers lists from the API server and counts them, standing for the informer cache gatewayd
// hands the API as its Lister.
type countingLister struct {
	client.Reader
	lists atomic.Int64
}

func (l *countingLister) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l.lists.Add(1)
	return l.Reader.List(ctx, list, opts...)
}

var _ = Describe("Listing groups", func() {
	It("reads the namespace through the Lister (gatewayd's informer cache), not the API server, page after page", func() {
		lister := &countingLister{Reader: resttest.Gatewayd}
		srv := resttest.Serve(rest.Options{Lister: lister})
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		for i := range 3 {
			r := resttest.Call(srv, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group(fmt.Sprintf("cust-listed-%d", i), "", nil, apibody.Model("demo/echo", nil, nil)))
			Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		}
		before := lister.lists.Load()
		r := resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups?limit=2", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		cursor := r.Body["pagination"].(map[string]any)["cursor"].(string)
		r = resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups?limit=2&cursor="+cursor, nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(lister.lists.Load()-before).To(Equal(int64(2)), "one Lister read per page")
	})
})
