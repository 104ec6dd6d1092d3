package rest_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
	"github.com/modelgate/modelgate/test/kubetest"
)

// The workspace-key permission model over real sockets, against the real API server, webhooks and materializer:
// the Workspace lists its members (ada is an organization ADMIN; tia and mo are MEMBERs), tia is ADMIN of team ml,
// mo is MEMBER of ml and ADMIN of team ops. Every PERSONAL key acts with these roles as the snapshot holds them.
var _ = Describe("Workspace-key permissions", Ordered, func() {
	var ns, ada, tia, mo, manager string

	// keysOf lists the caller's keys and returns them by prefix.
	keysOf := func(key string) map[string]map[string]any {
		GinkgoHelper()
		r := resttest.Call(resttest.Server, key, http.MethodGet, "/v1/api_keys", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("WorkspaceKeyList", r.Raw)
		out := map[string]map[string]any{}
		for _, k := range r.Body["keys"].([]any) {
			out[k.(map[string]any)["prefix"].(string)] = k.(map[string]any)
		}
		return out
	}
	create := func(caller, path string, body map[string]any) resttest.Response {
		GinkgoHelper()
		return resttest.Call(resttest.Server, caller, http.MethodPost, path, body)
	}
	mustCreate := func(caller, path string, body map[string]any) string {
		GinkgoHelper()
		r := create(caller, path, body)
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.Conform("CreatedWorkspaceKey", r.Raw)
		return r.Body["api_key"].(string)
	}
	team := func(id, name string, def bool, members ...gatewayv1.TeamMember) {
		GinkgoHelper()
		Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns},
			Spec: gatewayv1.TeamSpec{DisplayName: name, Default: def, Members: members}})).To(Succeed())
	}

	BeforeAll(func() {
		var err error
		ns, err = kubetest.NewNamespace(resttest.Ctx, resttest.Client, "perm-")
		Expect(err).NotTo(HaveOccurred())
		resttest.Dir.Add(ns)
		Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns},
			Spec: gatewayv1.WorkspaceSpec{Members: []gatewayv1.WorkspaceMember{
				{UserID: "ada", Email: "ada@example.com", Name: "Ada", Role: gatewayv1.OrgRoleAdmin},
				{UserID: "mo", Email: "mo@example.com", Name: "Mo", Role: gatewayv1.OrgRoleMember},
				{UserID: "tia", Email: "tia@example.com", Name: "Tia", Role: gatewayv1.OrgRoleMember},
			}}})).To(Succeed())
		team("ml", "Machine Learning", true, gatewayv1.TeamMember{UserID: "mo", Role: gatewayv1.TeamRoleMember},
			gatewayv1.TeamMember{UserID: "tia", Role: gatewayv1.TeamRoleAdmin})
		team("ops", "Operations", false, gatewayv1.TeamMember{UserID: "mo", Role: gatewayv1.TeamRoleAdmin})
		Eventually(func() int {
			s, err := resttest.ReadSnapshot(resttest.Ctx, resttest.Client, ns)
			if err != nil || !s.Workspace.MembershipManaged {
				return 0
			}
			return len(s.Teams)
		}).WithTimeout(30e9).Should(Equal(2), "the snapshot carries the members and both teams")
		// The role on each key is deliberately not the member's: the Workspace's list decides.
		ada = resttest.SeedKey(ns, gatewayv1.KeyTypePersonal, gatewayv1.OrgRoleMember, "ada")
		tia = resttest.SeedKey(ns, gatewayv1.KeyTypePersonal, gatewayv1.OrgRoleAdmin, "tia")
		mo = resttest.SeedKey(ns, gatewayv1.KeyTypePersonal, gatewayv1.OrgRoleMember, "mo")
	})

	It("lets the organization admin create a key-management key, recording who created it in spec.createdBy", func() {
		manager = mustCreate(ada, "/v1/api_keys", map[string]any{"type": "WORKSPACE_MANAGE_API_KEYS", "name": "keys-admin"})
		resttest.ExpectError(create(tia, "/v1/api_keys", map[string]any{"type": "WORKSPACE_MANAGE_API_KEYS", "name": "mine"}), http.StatusForbidden, "forbidden")

		k := workspaceKeyObject(ns, manager[:16])
		Expect(k.Spec.CreatedBy).To(Equal(&gatewayv1.KeyCreator{UserID: "ada"}))
		Expect(k.Annotations).NotTo(HaveKey("gateway.modelgate.io/created-by"), "the former annotation is no longer written")
	})

	It("lets a WORKSPACE_MANAGE_API_KEYS key create team keys of every level, but no PERSONAL or management key", func() {
		for i, typ := range []string{"WORKSPACE_MANAGE_ALL", "WORKSPACE_INVOKE", "WORKSPACE_EXPORT_METRICS"} {
			key := mustCreate(manager, "/v1/teams/ml/api_keys", map[string]any{"type": typ, "name": fmt.Sprintf("by-manager-%d", i)})
			k := workspaceKeyObject(ns, key[:16])
			Expect(k.Spec.TeamID).To(Equal("ml"))
			Expect(k.Spec.CreatedBy).To(Equal(&gatewayv1.KeyCreator{APIKeyPrefix: manager[:16]}))
			mustCreate(manager, "/v1/api_keys", map[string]any{"type": typ, "name": fmt.Sprintf("ops-by-manager-%d", i), "team_id": "ops"})
		}
		// Names are unique per team: a second "by-manager-0" in ml is a 409 naming the REST field, while the same
		// name in another team is fine.
		dup := create(manager, "/v1/teams/ml/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "by-manager-0"})
		resttest.ExpectError(dup, http.StatusConflict, "conflict")
		Expect(dup.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", "name")), "the refusal names the field: %s", dup)
		mustCreate(manager, "/v1/teams/ops/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "by-manager-0"})
		r := create(manager, "/v1/api_keys", map[string]any{"type": "PERSONAL", "name": "p"})
		resttest.ExpectError(r, http.StatusForbidden, "forbidden")
		Expect(r.Body["error"]).To(ContainSubstring("PERSONAL"), "the refusal names the rule: %s", r)
		resttest.ExpectError(create(manager, "/v1/api_keys", map[string]any{"type": "WORKSPACE_MANAGE_API_KEYS", "name": "m"}), http.StatusForbidden, "forbidden")

		By("refusing PERSONAL and management keys on the team route as input, naming the field")
		r = create(manager, "/v1/teams/ml/api_keys", map[string]any{"type": "PERSONAL", "name": "p"})
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", "type")))
	})

	It("answers 404 for an unknown team, and refuses the scope rules by field", func() {
		r := create(manager, "/v1/teams/nope/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "x"})
		resttest.ExpectError(r, http.StatusNotFound, "not_found")
		resttest.ExpectError(create(manager, "/v1/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "x", "team_id": "nope"}), http.StatusNotFound, "not_found")
		for field, body := range map[string]map[string]any{
			"team_id":      {"type": "PERSONAL", "name": "x", "team_id": "ml"},
			"environments": {"type": "WORKSPACE_EXPORT_METRICS", "name": "x", "environments": []string{"staging"}},
			"model_ids":    {"type": "WORKSPACE_MANAGE_ALL", "name": "x", "model_ids": []string{"m1"}},
			"name":         {"type": "WORKSPACE_INVOKE", "name": "Not Valid"},
			"type":         {"type": "ROOT", "name": "x"},
			// Every id of the scope lists is checked (docs/security.md "Ids a key's scope carries").
			"model_ids[0]":    {"type": "WORKSPACE_INVOKE", "name": "x", "model_ids": []string{""}},
			"model_ids[1]":    {"type": "WORKSPACE_INVOKE", "name": "x", "model_ids": []string{"m1", "../x"}},
			"environments[0]": {"type": "WORKSPACE_INVOKE", "name": "x", "environments": []string{"../x"}},
		} {
			r := create(ada, "/v1/api_keys", body)
			resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", field)), "%v: %s", body, r)
		}
		r = create(ada, "/v1/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "x", "environments": []string{"../x"}})
		Expect(r.Body["error"]).To(Equal(`environments[0]: must be an environment name (lowercase RFC 1123 label) (got "../x").`))
		By("allowing a WORKSPACE_MANAGE_ALL key scoped by environments, with models")
		mustCreate(ada, "/v1/teams/ml/api_keys", map[string]any{"type": "WORKSPACE_MANAGE_ALL", "name": "ml-staging",
			"environments": []string{"staging"}, "model_ids": []string{"m1"}})
	})

	It("lets a Team Admin create keys of their team only, and see exactly their team's keys and their own", func() {
		own := mustCreate(tia, "/v1/teams/ml/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "tia-ml", "model_ids": []string{"m1"}})
		r := create(tia, "/v1/teams/ops/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "x"})
		resttest.ExpectError(r, http.StatusNotFound, "not_found")
		r = create(mo, "/v1/teams/ml/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "x"})
		resttest.ExpectError(r, http.StatusForbidden, "forbidden")
		Expect(r.Body["error"]).To(ContainSubstring("admins of the key's team"))
		opsKey := mustCreate(mo, "/v1/teams/ops/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": "mo-ops"})

		var all gatewayv1.WorkspaceAPIKeyList
		Expect(resttest.Client.List(resttest.Ctx, &all, client.InNamespace(ns))).To(Succeed())
		var want []string
		for _, k := range all.Items {
			if k.Spec.TeamID == "ml" || (k.Spec.Owner != nil && k.Spec.Owner.UserID == "tia") {
				want = append(want, k.Spec.Prefix)
			}
		}
		got := keysOf(tia)
		Expect(slices.Collect(maps.Keys(got))).To(ConsistOf(want))
		Expect(got).To(HaveKey(own[:16]))
		Expect(got).NotTo(HaveKey(opsKey[:16]))
		Expect(got[own[:16]]["team_name"]).To(Equal("Machine Learning"))
		Expect(got[own[:16]]["model_ids"]).To(Equal([]any{"m1"}))
		Expect(got[own[:16]]["environments"]).To(Equal([]any{}))
		Expect(got[own[:16]]).NotTo(HaveKey("owner"), "only PERSONAL keys carry an owner")
		Expect(got[tia[:16]]["owner"]).To(Equal(map[string]any{"user_id": "tia", "email": "tia@example.com", "name": "tia"}))

		By("hiding another team's key on the single-key routes")
		resttest.ExpectError(resttest.Call(resttest.Server, tia, http.MethodDelete, "/v1/api_keys/"+opsKey[:16], nil), http.StatusNotFound, "not_found")
		resttest.ExpectError(resttest.Call(resttest.Server, tia, http.MethodPatch, "/v1/api_keys/"+opsKey[:16], map[string]any{"name": "mine"}), http.StatusNotFound, "not_found")

		By("letting a member see their own keys and the keys they created, not their team's")
		got = keysOf(mo)
		Expect(got).To(HaveKey(opsKey[:16]))
		Expect(got).To(HaveKey(mo[:16]))
		Expect(got).NotTo(HaveKey(own[:16]))
	})

	It("lets an organization admin revoke, but not rename, another member's PERSONAL key", func() {
		moLaptop := mustCreate(mo, "/v1/api_keys", map[string]any{"type": "PERSONAL", "name": "laptop"})
		Expect(keysOf(ada)).To(HaveKey(moLaptop[:16]), "organization admins see every member's PERSONAL keys")
		By("each listed key carries what the caller may do to it, as the routes below answer")
		Expect(keysOf(ada)[moLaptop[:16]]["can"]).To(Equal(map[string]any{"rename": false, "revoke": true}))
		Expect(keysOf(mo)[moLaptop[:16]]["can"]).To(Equal(map[string]any{"rename": true, "revoke": true}))
		Expect(keysOf(manager)[moLaptop[:16]]["can"]).To(Equal(map[string]any{"rename": false, "revoke": true}))

		r := resttest.Call(resttest.Server, ada, http.MethodPatch, "/v1/api_keys/"+moLaptop[:16], map[string]any{"name": "renamed"})
		resttest.ExpectError(r, http.StatusForbidden, "forbidden")
		Expect(r.Body["error"]).To(ContainSubstring("may not rename other members' PERSONAL keys"))

		By("a rename round trip by the owner, with the name rule named")
		r = resttest.Call(resttest.Server, mo, http.MethodPatch, "/v1/api_keys/"+moLaptop[:16], map[string]any{"name": "work-laptop"})
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("WorkspaceKey", r.Raw)
		Expect(r.Body["name"]).To(Equal("work-laptop"))
		Expect(keysOf(mo)[moLaptop[:16]]["name"]).To(Equal("work-laptop"))
		r = resttest.Call(resttest.Server, mo, http.MethodPatch, "/v1/api_keys/"+moLaptop[:16], map[string]any{"name": "Work Laptop"})
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", "name")))
		resttest.ExpectError(resttest.Call(resttest.Server, mo, http.MethodPatch, "/v1/api_keys/"+moLaptop[:16], map[string]any{}), http.StatusBadRequest, "invalid_request")

		By("revocation by the admin, a delete round trip")
		r = resttest.Call(resttest.Server, ada, http.MethodDelete, "/v1/api_keys/"+moLaptop[:16], nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body).To(Equal(map[string]any{"prefix": moLaptop[:16]}))
		resttest.ExpectError(resttest.Call(resttest.Server, moLaptop, http.MethodGet, "/v1/api_keys", nil), http.StatusUnauthorized, "unauthorized")
		Expect(keysOf(mo)).NotTo(HaveKey(moLaptop[:16]))
		resttest.ExpectError(resttest.Call(resttest.Server, ada, http.MethodDelete, "/v1/api_keys/"+moLaptop[:16], nil), http.StatusNotFound, "not_found")

		By("key-management keys revoke team keys but rename nothing")
		victim := mustCreate(ada, "/v1/teams/ops/api_keys", map[string]any{"type": "WORKSPACE_EXPORT_METRICS", "name": "victim"})
		resttest.ExpectError(resttest.Call(resttest.Server, manager, http.MethodPatch, "/v1/api_keys/"+victim[:16], map[string]any{"name": "x"}), http.StatusForbidden, "forbidden")
		Expect(resttest.Call(resttest.Server, manager, http.MethodDelete, "/v1/api_keys/"+victim[:16], nil).Code).To(Equal(http.StatusOK))
	})

	It("lists the teams each caller may list", func() {
		teamIDs := func(key string) []string {
			GinkgoHelper()
			r := resttest.Call(resttest.Server, key, http.MethodGet, "/v1/teams", nil)
			Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
			resttest.Conform("TeamList", r.Raw)
			var ids []string
			for _, t := range r.Body["teams"].([]any) {
				ids = append(ids, t.(map[string]any)["id"].(string))
			}
			return ids
		}
		Expect(teamIDs(ada)).To(Equal([]string{"ml", "ops"}))
		Expect(teamIDs(manager)).To(Equal([]string{"ml", "ops"}))
		Expect(teamIDs(tia)).To(Equal([]string{"ml"}))
		Expect(teamIDs(mo)).To(Equal([]string{"ml", "ops"}))
		r := resttest.Call(resttest.Server, ada, http.MethodGet, "/v1/teams", nil)
		Expect(r.Body["teams"].([]any)[0]).To(SatisfyAll(HaveKeyWithValue("name", "Machine Learning"), HaveKeyWithValue("default", true), HaveKey("created_at")))

		mlInvoke := mustCreate(ada, "/v1/teams/ml/api_keys", map[string]any{"type": "WORKSPACE_MANAGE_ALL", "name": "ml-all"})
		Eventually(func() bool { _, ok := resttest.Dir.Lookup(mlInvoke); return ok }).WithTimeout(30e9).Should(BeTrue())
		Expect(teamIDs(mlInvoke)).To(Equal([]string{"ml"}), "a team key lists its own team")
		invoke := resttest.SeedKey(ns, gatewayv1.KeyTypeInvoke, "", "")
		resttest.ExpectError(resttest.Call(resttest.Server, invoke, http.MethodGet, "/v1/teams", nil), http.StatusForbidden, "forbidden")
	})

	It("deprovisions with the next snapshot: a member removed from the Workspace acts no more", func() {
		// The manager writes the Workspace's status meanwhile: read and write again on a conflict, as kubectl edit would.
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var ws gatewayv1.Workspace
			if err := resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &ws); err != nil {
				return err
			}
			ws.Spec.Members = slices.DeleteFunc(ws.Spec.Members, func(m gatewayv1.WorkspaceMember) bool { return m.UserID == "tia" })
			return resttest.Client.Update(resttest.Ctx, &ws)
		})).To(Succeed())
		Eventually(func() bool {
			s, err := resttest.ReadSnapshot(resttest.Ctx, resttest.Client, ns)
			return err == nil && !slices.ContainsFunc(s.Workspace.Members, func(m snapshot.Member) bool { return m.UserID == "tia" })
		}).WithTimeout(30e9).Should(BeTrue())
		// Until the manager deletes the key, it may still authenticate, but it is no one's.
		r := resttest.Call(resttest.Server, tia, http.MethodGet, "/v1/api_keys", nil)
		Expect(r.Code).To(BeElementOf(http.StatusForbidden, http.StatusUnauthorized), "%s", r)
	})
})

// workspaceKeyObject reads the WorkspaceAPIKey of prefix from the API server.
func workspaceKeyObject(ns, prefix string) gatewayv1.WorkspaceAPIKey {
	GinkgoHelper()
	var list gatewayv1.WorkspaceAPIKeyList
	Expect(resttest.Client.List(resttest.Ctx, &list, client.InNamespace(ns), client.MatchingFields{gatewayv1.FieldSpecPrefix: prefix})).To(Succeed())
	Expect(list.Items).To(HaveLen(1))
	return list.Items[0]
}
