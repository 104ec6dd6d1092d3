package workspacekeys_test

import (
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
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
