package rest_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
	"github.com/modelgate/modelgate/test/apibody"
)

var _ = Describe("Authentication and workspace keys", Ordered, func() {
	var ns, admin, member, manager string

	BeforeAll(func() {
		ns, admin = resttest.Workspace(gatewayv1.KeyTypePersonal, gatewayv1.OrgRoleAdmin)
		member = resttest.SeedKey(ns, gatewayv1.KeyTypePersonal, gatewayv1.OrgRoleMember, "user-2")
	})

	It("answers 401 without a key or with an unknown one, and accepts both Bearer and Api-Key", func() {
		resttest.ExpectError(resttest.Call(resttest.Server, "", http.MethodGet, "/v1/gateway/groups", nil), http.StatusUnauthorized, "unauthorized")
		resttest.ExpectError(resttest.Call(resttest.Server, "mgw_unknown00000.nope", http.MethodGet, "/v1/gateway/groups", nil), http.StatusUnauthorized, "unauthorized")
		resttest.ExpectError(resttest.Call(resttest.Server, "", http.MethodGet, "/v1/gateway/groups", nil, "Authorization", "Basic "+admin), http.StatusUnauthorized, "unauthorized")
		Expect(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups", nil).Code).To(Equal(http.StatusOK))
		Expect(resttest.Call(resttest.Server, "", http.MethodGet, "/v1/gateway/groups", nil, "Authorization", "Api-Key "+admin).Code).To(Equal(http.StatusOK))
	})

	It("refuses federated keys on management routes", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-auth", "", nil, apibody.Model("demo/echo", nil, nil)))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups/"+r.Body["id"].(string)+"/api_keys", nil)
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.ExpectError(resttest.Call(resttest.Server, r.Body["api_key"].(string), http.MethodGet, "/v1/gateway/groups", nil), http.StatusUnauthorized, "unauthorized")
	})

	It("lets an admin create a key-management key that works at once", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/api_keys", map[string]any{"type": "WORKSPACE_MANAGE_API_KEYS", "name": "key-admin"})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.Conform("CreatedWorkspaceKey", r.Raw)
		manager = r.Body["api_key"].(string)
		Expect(manager).To(MatchRegexp(`^mgw_[0-9A-Za-z]{12}\.[0-9A-Za-z]{32}$`))
		Expect(resttest.Call(resttest.Server, manager, http.MethodGet, "/v1/api_keys", nil).Code).To(Equal(http.StatusOK))
	})

	It("gives each key type only its routes", func() {
		resttest.ExpectError(resttest.Call(resttest.Server, manager, http.MethodGet, "/v1/gateway/groups", nil), http.StatusForbidden, "forbidden")
		resttest.ExpectError(resttest.Call(resttest.Server, member, http.MethodGet, "/v1/gateway/groups", nil), http.StatusForbidden, "forbidden")
		for _, typ := range []gatewayv1.WorkspaceKeyType{gatewayv1.KeyTypeInvoke, gatewayv1.KeyTypeExportMetrics} {
			k := resttest.SeedKey(ns, typ, "", "")
			resttest.ExpectError(resttest.Call(resttest.Server, k, http.MethodGet, "/v1/gateway/groups", nil), http.StatusForbidden, "forbidden")
			resttest.ExpectError(resttest.Call(resttest.Server, k, http.MethodGet, "/v1/api_keys", nil), http.StatusForbidden, "forbidden")
		}
		manageAll := resttest.SeedKey(ns, gatewayv1.KeyTypeManageAll, "", "")
		resttest.ExpectError(resttest.Call(resttest.Server, manageAll, http.MethodGet, "/v1/api_keys", nil), http.StatusForbidden, "forbidden")
	})

	It("lets a key-management key create team keys only, and see and revoke team and personal keys", func() {
		Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: ns},
			Spec: gatewayv1.TeamSpec{DisplayName: "Team A"}})).To(Succeed())
		r := resttest.Call(resttest.Server, manager, http.MethodPost, "/v1/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "inference", "team_id": "team-a", "model_ids": []string{"demo/echo"}})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		invoke := r.Body["api_key"].(string)
		resttest.ExpectError(resttest.Call(resttest.Server, manager, http.MethodPost, "/v1/api_keys", map[string]any{"type": "PERSONAL", "name": "p"}), http.StatusForbidden, "forbidden")
		resttest.ExpectError(resttest.Call(resttest.Server, manager, http.MethodPost, "/v1/api_keys", map[string]any{"type": "WORKSPACE_MANAGE_API_KEYS", "name": "m"}), http.StatusForbidden, "forbidden")
		resttest.ExpectError(resttest.Call(resttest.Server, manager, http.MethodPost, "/v1/api_keys", map[string]any{"type": "ROOT", "name": "m"}), http.StatusBadRequest, "invalid_request")
		resttest.ExpectError(resttest.Call(resttest.Server, manager, http.MethodPost, "/v1/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "Not Valid"}), http.StatusBadRequest, "invalid_request")

		r = resttest.Call(resttest.Server, manager, http.MethodGet, "/v1/api_keys", nil)
		Expect(r.Code).To(Equal(http.StatusOK))
		resttest.Conform("WorkspaceKeyList", r.Raw)
		types := keyTypes(r)
		Expect(types).To(ContainElements("WORKSPACE_INVOKE", "PERSONAL"))
		var managers []string
		for _, k := range r.Body["keys"].([]any) {
			if k.(map[string]any)["type"] == "WORKSPACE_MANAGE_API_KEYS" {
				managers = append(managers, k.(map[string]any)["prefix"].(string))
			}
		}
		Expect(managers).To(Equal([]string{manager[:16]}), "of the management keys, a key-management key sees only itself")
		for _, k := range r.Body["keys"].([]any) {
			if k.(map[string]any)["type"] == "PERSONAL" {
				Expect(k.(map[string]any)["owner"]).To(HaveKey("user_id"))
			}
		}

		r = resttest.Call(resttest.Server, manager, http.MethodDelete, "/v1/api_keys/"+invoke[:16], nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body).To(Equal(map[string]any{"prefix": invoke[:16]}))
		resttest.ExpectError(resttest.Call(resttest.Server, invoke, http.MethodGet, "/v1/api_keys", nil), http.StatusUnauthorized, "unauthorized")
		resttest.ExpectError(resttest.Call(resttest.Server, manager, http.MethodDelete, "/v1/api_keys/"+invoke[:16], nil), http.StatusNotFound, "not_found")
		// It sees its own record, but only organization admins revoke management keys.
		resttest.ExpectError(resttest.Call(resttest.Server, manager, http.MethodDelete, "/v1/api_keys/"+manager[:16], nil), http.StatusForbidden, "forbidden")
	})

	It("lets a member see only their own personal keys and the keys they created", func() {
		r := resttest.Call(resttest.Server, member, http.MethodPost, "/v1/api_keys", map[string]any{"type": "PERSONAL", "name": "laptop"})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.ExpectError(resttest.Call(resttest.Server, member, http.MethodPost, "/v1/api_keys", map[string]any{"type": "WORKSPACE_MANAGE_ALL", "name": "team"}), http.StatusForbidden, "forbidden")
		r = resttest.Call(resttest.Server, member, http.MethodGet, "/v1/api_keys", nil)
		Expect(r.Code).To(Equal(http.StatusOK))
		Expect(r.Body["keys"]).To(HaveLen(2), "the seeded key and the new one: %s", r)
		for _, k := range r.Body["keys"].([]any) {
			Expect(k.(map[string]any)["owner"].(map[string]any)["user_id"]).To(Equal("user-2"))
		}
		r = resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/api_keys", nil)
		Expect(keyTypes(r)).To(ContainElement("WORKSPACE_MANAGE_API_KEYS"), "admins see every key")
		resttest.ExpectError(resttest.Call(resttest.Server, member, http.MethodDelete, "/v1/api_keys/"+admin[:16], nil), http.StatusNotFound, "not_found")
	})
})

func keyTypes(r resttest.Response) []string {
	var out []string
	for _, k := range r.Body["keys"].([]any) {
		out = append(out, k.(map[string]any)["type"].(string))
	}
	return out
}

// clock is a settable time source for rate-limit specs.
var _ = Describe("Management rate limits", func() {
	It("refuses the 101st call of a key on a route within a second with the exact body, and only that", func() {
		clk := resttest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 250_000_000, time.UTC))
		srv := resttest.Serve(rest.Options{Clock: clk.Now})
		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		other := resttest.SeedKey(ns, gatewayv1.KeyTypeManageAll, "", "")
		for i := range 100 {
			r := resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/grp-missing0000000", nil)
			Expect(r.Code).To(Equal(http.StatusNotFound), "call %d", i+1)
		}
		r := resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/grp-missing0000000", nil)
		Expect(r.Code).To(Equal(http.StatusTooManyRequests))
		Expect(r.Header.Get("Retry-After")).To(Equal("1"))
		var body map[string]any
		Expect(json.Unmarshal(r.Raw, &body)).To(Succeed())
		Expect(body).To(Equal(map[string]any{"error": "Rate limit exceeded. Please try again later.", "retry_after": 1.0}))
		resttest.Conform("RateLimited", r.Raw)

		By("counting per route pattern, not per path")
		Expect(resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/grp-other000000000", nil).Code).To(Equal(http.StatusTooManyRequests))
		By("leaving other routes and other keys alone")
		Expect(resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/endpoints", nil).Code).To(Equal(http.StatusOK))
		Expect(resttest.Call(srv, other, http.MethodGet, "/v1/gateway/groups/grp-missing0000000", nil).Code).To(Equal(http.StatusNotFound))
		By("freeing the window when the second is over")
		clk.Add(750 * time.Millisecond)
		Expect(resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/grp-missing0000000", nil).Code).To(Equal(http.StatusNotFound))
	})

	It("walks the table row by row: each row is its own bucket per key, and its 429 is exact", func() {
		// The table of docs/rest-api.md "Management rate limits", as calls: the three deployment selectors of
		// activate, deactivate and retry are rows of their own; every other endpoint is its own row at 100 per
		// second, by method and route (a few of them here, beside the rows they could be confused with).
		type row struct {
			method, path string
			n            int
			window       time.Duration
		}
		const deployments = "/v1/models/rl-model/deployments/"
		table := []row{
			{"POST", deployments + "development/activate", 20, time.Minute},
			{"POST", deployments + "production/activate", 20, time.Minute},
			{"POST", deployments + "dep-1/activate", 20, time.Minute},
			{"POST", deployments + "development/deactivate", 20, time.Minute},
			{"POST", deployments + "production/deactivate", 20, time.Minute},
			{"POST", deployments + "dep-1/deactivate", 20, time.Minute},
			{"POST", deployments + "development/retry", 10, time.Minute},
			{"POST", deployments + "production/retry", 10, time.Minute},
			{"POST", deployments + "dep-1/retry", 10, time.Minute},
			{"POST", deployments + "dep-1/logs", 30, time.Second},
			{"GET", deployments + "production", 100, time.Second},
			{"DELETE", deployments + "production", 100, time.Second},
			{"POST", "/v1/models/rl-model/environments/production/activate", 100, time.Second},
		}
		clk := resttest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 250_000_000, time.UTC))
		srv := resttest.Serve(rest.Options{Clock: clk.Now})
		ns, key := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		other := resttest.SeedKey(ns, gatewayv1.KeyTypeManageAll, "", "")
		for _, rw := range table {
			By(rw.method + " " + rw.path)
			// A new minute: every window of the previous row is over.
			clk.Add(time.Minute)
			for i := range rw.n {
				r := resttest.Call(srv, key, rw.method, rw.path, nil)
				Expect(r.Code).NotTo(Equal(http.StatusTooManyRequests), "%s %s: call %d of %d refused", rw.method, rw.path, i+1, rw.n)
			}
			r := resttest.Call(srv, key, rw.method, rw.path, nil)
			wait := clk.Now().Truncate(rw.window).Add(rw.window).Sub(clk.Now())
			secs := int((wait + time.Second - 1) / time.Second)
			Expect(r.Code).To(Equal(http.StatusTooManyRequests), "%s %s: call %d: %s", rw.method, rw.path, rw.n+1, r)
			Expect(r.Header.Get("Retry-After")).To(Equal(strconv.Itoa(secs)))
			Expect(r.Body).To(Equal(map[string]any{"error": "Rate limit exceeded. Please try again later.", "retry_after": float64(secs)}))
			resttest.Conform("RateLimited", r.Raw)

			for _, neighbour := range table {
				if neighbour != rw {
					r := resttest.Call(srv, key, neighbour.method, neighbour.path, nil)
					Expect(r.Code).NotTo(Equal(http.StatusTooManyRequests), "%s %s shares the bucket of %s %s", neighbour.method, neighbour.path, rw.method, rw.path)
				}
			}
			r = resttest.Call(srv, other, rw.method, rw.path, nil)
			Expect(r.Code).NotTo(Equal(http.StatusTooManyRequests), "another key shares the bucket of %s %s", rw.method, rw.path)
		}
	})
})

var _ = Describe("Bad input", func() {
	It("answers a clear 4xx for malformed JSON, unknown fields, wrong types, huge bodies and invalid ids", func() {
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		post := func(body any) resttest.Response {
			return resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", body)
		}

		resttest.ExpectError(post(`{"metadata":`), http.StatusBadRequest, "malformed_json")
		resttest.ExpectError(post(`not json`), http.StatusBadRequest, "malformed_json")
		resttest.ExpectError(post(``), http.StatusBadRequest, "malformed_json")
		resttest.ExpectError(post(`{"models":[]} {"again":1}`), http.StatusBadRequest, "malformed_json")

		r := post(`{"metadata":{"external_entity_id":"x"},"models":[{"slug":"a"}],"colour":"red"}`)
		resttest.ExpectError(r, http.StatusBadRequest, "unknown_field")
		Expect(r.Body["error"]).To(ContainSubstring("colour"))

		r = post(`{"metadata":{"external_entity_id":"x"},"models":"all"}`)
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_type")
		Expect(r.Body["error"]).To(ContainSubstring("models"))
		r = post(`{"metadata":{"external_entity_id":"x"},"models":[{"slug":"a","rate_limits":[{"type":"REQUEST","unit":"SECOND","threshold":"ten"}]}]}`)
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_type")
		Expect(r.Body["error"]).To(ContainSubstring("threshold"))

		huge := `{"metadata":{"name":"` + strings.Repeat("x", 2<<20) + `","external_entity_id":"x"},"models":[{"slug":"a"}]}`
		r = post(huge)
		resttest.ExpectError(r, http.StatusRequestEntityTooLarge, "payload_too_large")
		Expect(r.Body["detail"]).To(ConsistOf(HaveKeyWithValue("field", "body")), "the body is named as every refused field is")

		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/groups/UPPER_case", map[string]any{"models": []any{}}), http.StatusBadRequest, "invalid_request")
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/gateway/endpoints/-bad-", nil), http.StatusBadRequest, "invalid_request")
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups/"+strings.Repeat("a", 300), nil), http.StatusBadRequest, "invalid_request")
	})
})
