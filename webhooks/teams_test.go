package webhooks_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/webhooks"
)

func team(ns, name string, def bool) *gatewayv1.Team {
	return &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.TeamSpec{DisplayName: name, Default: def}}
}

// namedKey is a WorkspaceAPIKey of type typ named name, in team (team keys) or owned by owner (PERSONAL).
func namedKey(ns, objName, name string, typ gatewayv1.WorkspaceKeyType, team, owner string) *gatewayv1.WorkspaceAPIKey {
	k := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: objName}}
	k.Spec.Type, k.Spec.DisplayName, k.Spec.TeamID = typ, name, team
	if owner != "" {
		k.Spec.Owner = &gatewayv1.KeyOwner{UserID: owner}
	}
	return k
}

var _ = Describe("Team webhook", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("refuses a name that is not a DNS-1123 label", func() {
		expectRefused(k8s.Create(ctx, team(ns, "ml.research", false)), "metadata.name", "must be a DNS-1123 label")
		Expect(k8s.Create(ctx, team(ns, "ml-research", false))).To(Succeed())
	})

	It("refuses a second default team, on create and on update, and frees the default once the first is being deleted", func() {
		first := team(ns, "ml", true)
		first.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, first)).To(Succeed())
		expectRefused(k8s.Create(ctx, team(ns, "web", true)), "spec.default", "Team ml is already the default team")

		web := team(ns, "web", false)
		Expect(k8s.Create(ctx, web)).To(Succeed(), "a team that is not the default is admitted")
		web.Spec.Default = true
		expectRefused(k8s.Update(ctx, web), "spec.default", "at most one Team per namespace may set spec.default")

		By("deleting the default: a Team being deleted no longer holds it")
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(web), web)).To(Succeed())
		web.Spec.Default = true
		Expect(k8s.Update(ctx, web)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(first), first)).To(Succeed())
		first.Finalizers = nil
		Expect(k8s.Update(ctx, first)).To(Succeed(), "an update of a team being deleted is not judged")
	})

	It("admits deleting a team that keys and models still name, and warns of the keys it revokes and of the rest", func() {
		// Admitted before its Team existed: not bound to it, so not revoked with it.
		Expect(k8s.Create(ctx, namedKey(ns, "ml-early", "early", gatewayv1.KeyTypeInvoke, "ml", ""))).To(Succeed())
		t := team(ns, "ml", false)
		Expect(k8s.Create(ctx, t)).To(Succeed())
		Expect(k8s.Create(ctx, namedKey(ns, "ml-ci", "ci", gatewayv1.KeyTypeInvoke, "ml", ""))).To(Succeed())
		m := &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sentiment"},
			Spec: gatewayv1.ModelSpec{TeamID: "ml", Environments: []gatewayv1.ModelEnvironment{{Name: "production"}}}}
		Expect(k8s.Create(ctx, m)).To(Succeed())

		// The validator as admission runs it, reading the real API server, to see its warnings.
		v := &webhooks.TeamValidator{Reader: k8s}
		warnings, err := v.ValidateDelete(ctx, t)
		Expect(err).NotTo(HaveOccurred())
		Expect(warnings).To(ConsistOf(
			ContainSubstring("deleting Team ml revokes its team keys WorkspaceAPIKey ml-ci: they stop authenticating now, and a Team created again as ml does not bring them back"),
			ContainSubstring("Team ml is still named by spec.teamID of WorkspaceAPIKey ml-early, Model sentiment; they are kept")))
		for _, w := range warnings {
			Expect(w).NotTo(MatchRegexp("ml-ci.*reach no team resources until"), "a revoked key never returns")
		}

		Expect(k8s.Delete(ctx, t)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ml-ci"}, &gatewayv1.WorkspaceAPIKey{})).To(Succeed(), "nothing is deleted")

		By("a Team of the same name again: the revoked key is no longer named; the others are")
		again := team(ns, "ml", false)
		Expect(k8s.Create(ctx, again)).To(Succeed())
		warnings, err = v.ValidateDelete(ctx, again)
		Expect(err).NotTo(HaveOccurred())
		Expect(warnings).To(ConsistOf(ContainSubstring("Team ml is still named by spec.teamID of WorkspaceAPIKey ml-early, Model sentiment;")))
	})
})

var _ = Describe("WorkspaceAPIKey names", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("are unique per team, whatever the team key's type, and free across teams", func() {
		Expect(k8s.Create(ctx, namedKey(ns, "k1", "ci", gatewayv1.KeyTypeInvoke, "ml", ""))).To(Succeed())
		expectRefused(k8s.Create(ctx, namedKey(ns, "k2", "ci", gatewayv1.KeyTypeManageAll, "ml", "")),
			"spec.displayName", "already used by WorkspaceAPIKey k1; spec.displayName must be unique among the keys of team ml")
		expectRefused(k8s.Create(ctx, namedKey(ns, "k3", "ci", gatewayv1.KeyTypeExportMetrics, "ml", "")),
			"spec.displayName", "must be unique among the keys of team ml")
		Expect(k8s.Create(ctx, namedKey(ns, "k4", "ci", gatewayv1.KeyTypeInvoke, "web", ""))).To(Succeed(), "same name in another team")
		Expect(k8s.Create(ctx, namedKey(ns, "k5", "ci", gatewayv1.KeyTypeInvoke, "", ""))).To(Succeed(), "same name as a workspace-wide team key")
		expectRefused(k8s.Create(ctx, namedKey(ns, "k6", "ci", gatewayv1.KeyTypeManageAll, "", "")),
			"spec.displayName", "must be unique among the workspace-wide team keys (no teamID)")
	})

	It("are unique per user for PERSONAL keys, and free across users", func() {
		Expect(k8s.Create(ctx, namedKey(ns, "p1", "laptop", gatewayv1.KeyTypePersonal, "", "alice"))).To(Succeed())
		expectRefused(k8s.Create(ctx, namedKey(ns, "p2", "laptop", gatewayv1.KeyTypePersonal, "", "alice")),
			"spec.displayName", "already used by WorkspaceAPIKey p1; spec.displayName must be unique among the PERSONAL keys of user alice")
		Expect(k8s.Create(ctx, namedKey(ns, "p3", "laptop", gatewayv1.KeyTypePersonal, "", "bob"))).To(Succeed(), "same name, another user")
		Expect(k8s.Create(ctx, namedKey(ns, "p4", "laptop", gatewayv1.KeyTypeInvoke, "", ""))).To(Succeed(), "same name, a team key")
	})

	It("are unique per workspace for key-management keys", func() {
		Expect(k8s.Create(ctx, namedKey(ns, "m1", "keys", gatewayv1.KeyTypeManageAPIKeys, "", ""))).To(Succeed())
		expectRefused(k8s.Create(ctx, namedKey(ns, "m2", "keys", gatewayv1.KeyTypeManageAPIKeys, "", "")),
			"spec.displayName", "must be unique among the WORKSPACE_MANAGE_API_KEYS keys of the workspace")
		Expect(k8s.Create(ctx, namedKey(ns, "m3", "keys", gatewayv1.KeyTypePersonal, "", "alice"))).To(Succeed())
	})

	It("refuse a rename or a move into another team onto a taken name, and free a name being deleted", func() {
		held := namedKey(ns, "k1", "ci", gatewayv1.KeyTypeInvoke, "ml", "")
		held.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, held)).To(Succeed())
		other := namedKey(ns, "k2", "deploy", gatewayv1.KeyTypeInvoke, "ml", "")
		Expect(k8s.Create(ctx, other)).To(Succeed())
		other.Spec.DisplayName = "ci"
		expectRefused(k8s.Update(ctx, other), "spec.displayName", "must be unique among the keys of team ml")

		moved := namedKey(ns, "k3", "ci", gatewayv1.KeyTypeInvoke, "web", "")
		Expect(k8s.Create(ctx, moved)).To(Succeed())
		moved.Spec.TeamID = "ml"
		expectRefused(k8s.Update(ctx, moved), "spec.displayName", "must be unique among the keys of team ml")

		Expect(k8s.Delete(ctx, held)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(other), other)).To(Succeed())
		other.Spec.DisplayName = "ci"
		Expect(k8s.Update(ctx, other)).To(Succeed(), "a key being deleted no longer holds its name")
		letGo(held)
	})

	It("admit exactly one of 10 concurrent creates of one name in one team, in each of 5 races", func() {
		for trial := range 5 {
			won := race(10, "spec.displayName", func(i int) client.Object {
				return namedKey(ns, fmt.Sprintf("k-%d-%d", trial, i), fmt.Sprintf("contested-%d", trial), gatewayv1.KeyTypeInvoke, "ml", "")
			})
			Expect(won).To(Equal(1), "race %d", trial)
		}
	})

	It("admit a team key whose Team does not exist yet, with a warning", func() {
		k := namedKey(ns, "early", "early", gatewayv1.KeyTypeInvoke, "later", "")
		Expect(k8s.Create(ctx, k)).To(Succeed(), "GitOps may apply the Team after the key")
		v := &webhooks.WorkspaceAPIKeyValidator{Reader: k8s}
		warnings, err := v.ValidateCreate(ctx, namedKey(ns, "early-2", "early-2", gatewayv1.KeyTypeInvoke, "later", ""))
		Expect(err).NotTo(HaveOccurred())
		Expect(warnings).To(ConsistOf(ContainSubstring("spec.teamID: Team later does not exist")))

		Expect(k8s.Create(ctx, team(ns, "later", false))).To(Succeed())
		warnings, err = v.ValidateCreate(ctx, namedKey(ns, "early-3", "early-3", gatewayv1.KeyTypeInvoke, "later", ""))
		Expect(err).NotTo(HaveOccurred())
		Expect(warnings).To(BeEmpty())
	})
})

var _ = Describe("Workspace members", func() {
	It("warn of whom an update deprovisions", func() {
		v := &webhooks.WorkspaceValidator{Reader: k8s}
		ws := func(ids ...string) *gatewayv1.Workspace {
			w := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
			if ids != nil {
				w.Spec.Members = []gatewayv1.WorkspaceMember{}
			}
			for _, id := range ids {
				if id != "" {
					w.Spec.Members = append(w.Spec.Members, gatewayv1.WorkspaceMember{UserID: id, Role: gatewayv1.OrgRoleMember})
				}
			}
			return w
		}
		for _, tc := range []struct {
			old, new *gatewayv1.Workspace
			want     []string
		}{
			{ws(), ws(), nil},
			{ws(), ws("alice"), []string{"spec.members: Workspace default adopts membership; the manager deletes the PERSONAL keys of every user it does not list"}},
			{ws("alice", "bob", "carol"), ws("bob"), []string{"spec.members: removing alice, carol deprovisions them; the manager deletes their PERSONAL keys"}},
			{ws("alice"), ws("alice", "bob"), nil},
			{ws("alice"), ws(), nil}, // back to unmanaged: nobody is deprovisioned
		} {
			warnings, err := v.ValidateUpdate(ctx, tc.old, tc.new)
			Expect(err).NotTo(HaveOccurred())
			if tc.want == nil {
				Expect(warnings).To(BeEmpty())
			} else {
				Expect([]string(warnings)).To(Equal(tc.want))
			}
		}
	})
})
