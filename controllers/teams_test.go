package controllers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

// workspaceKey is a WorkspaceAPIKey with a spec prefix and hash (as REST mints them), so it is served without
// waiting for a Secret.
func workspaceKey(ns, name string, typ gatewayv1.WorkspaceKeyType, prefix string) *gatewayv1.WorkspaceAPIKey {
	sum := sha256.Sum256([]byte(prefix + ".secret-of-" + name))
	return &gatewayv1.WorkspaceAPIKey{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.WorkspaceAPIKeySpec{Type: typ,
			KeySource: gatewayv1.KeySource{Prefix: prefix, Hash: hex.EncodeToString(sum[:])}},
	}
}

// plaintext is the key whose prefix and hash workspaceKey stored.
func plaintext(k *gatewayv1.WorkspaceAPIKey) string { return k.Spec.Prefix + ".secret-of-" + k.Name }

func personalKey(ns, name, owner, prefix string) *gatewayv1.WorkspaceAPIKey {
	k := workspaceKey(ns, name, gatewayv1.KeyTypePersonal, prefix)
	k.Spec.Owner = &gatewayv1.KeyOwner{UserID: owner}
	return k
}

func members(ids ...string) []gatewayv1.WorkspaceMember {
	out := []gatewayv1.WorkspaceMember{}
	for _, id := range ids {
		out = append(out, gatewayv1.WorkspaceMember{UserID: id, Email: id + "@example.com", Role: gatewayv1.OrgRoleMember})
	}
	return out
}

// servedPrefixes returns the prefixes of the workspace keys in the published snapshot of ns.
func servedPrefixes(ns string) func(Gomega) []string {
	return func(g Gomega) []string {
		s, _, _, err := readSnapshot(ns)
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, k := range s.WorkspaceAPIKeys {
			out = append(out, k.Prefix)
		}
		return out
	}
}

// servedKey returns the snapshot entry of the workspace key with this prefix.
func servedKey(ns, prefix string) func(Gomega) *snapshot.WorkspaceAPIKey {
	return func(g Gomega) *snapshot.WorkspaceAPIKey {
		s, _, _, err := readSnapshot(ns)
		g.Expect(err).NotTo(HaveOccurred())
		for i := range s.WorkspaceAPIKeys {
			if s.WorkspaceAPIKeys[i].Prefix == prefix {
				return &s.WorkspaceAPIKeys[i]
			}
		}
		return nil
	}
}

// eventsFor lists the Events of the object of kind and name as "Reason: message".
func eventsFor(ns, kind, name string) func(Gomega) []string {
	return func(g Gomega) []string {
		var list corev1.EventList
		g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
				out = append(out, e.Reason+": "+e.Message)
			}
		}
		return out
	}
}

func exists(obj client.Object) func() bool {
	return func() bool {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		Expect(client.IgnoreNotFound(err)).To(Succeed())
		return err == nil
	}
}

var _ = Describe("Deprovisioning", func() {
	It("deletes the PERSONAL keys of a member removed from the Workspace, with an Event each, and they leave the snapshot", func() {
		ns := newNamespace()
		ws := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"},
			Spec: gatewayv1.WorkspaceSpec{Members: members("alice", "carol")}}
		Expect(k8s.Create(ctx, ws)).To(Succeed())
		team := &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ml"}, Spec: gatewayv1.TeamSpec{
			DisplayName: "ML", Members: []gatewayv1.TeamMember{{UserID: "carol", Role: gatewayv1.TeamRoleAdmin}}}}
		Expect(k8s.Create(ctx, team)).To(Succeed())

		alice := personalKey(ns, "alice-laptop", "alice", "mgw_alice0000001")
		carol1 := personalKey(ns, "carol-laptop", "carol", "mgw_carol0000001")
		carol2 := personalKey(ns, "carol-ci", "carol", "mgw_carol0000002")
		teamKey := workspaceKey(ns, "ml-invoke", gatewayv1.KeyTypeInvoke, "mgw_teamkey00001")
		teamKey.Spec.TeamID = "ml"
		teamKey.Spec.CreatedBy = &gatewayv1.KeyCreator{UserID: "carol"}
		for _, k := range []*gatewayv1.WorkspaceAPIKey{alice, carol1, carol2, teamKey} {
			Expect(k8s.Create(ctx, k)).To(Succeed())
		}
		Eventually(servedPrefixes(ns), timeout, poll).Should(ConsistOf(
			"mgw_alice0000001", "mgw_carol0000001", "mgw_carol0000002", "mgw_teamkey00001"))

		By("calling a real gatewayd, which loads the published snapshots, with carol's key")
		gw, err := gatewayd.New(gatewayd.Options{RESTConfig: restConfig, Namespaces: []string{ns}})
		Expect(err).NotTo(HaveOccurred())
		gctx, stop := context.WithCancel(ctx)
		DeferCleanup(stop)
		base, err := gatewaytest.Serve(gctx, gw)
		Expect(err).NotTo(HaveOccurred())
		carolStatus := func() int {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/api_keys", nil)
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Authorization", "Bearer "+plaintext(carol1))
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			_ = resp.Body.Close()
			return resp.StatusCode
		}
		Eventually(carolStatus, timeout, poll).Should(Equal(http.StatusOK), "carol's key lists keys while she is a member")

		By("removing carol from the Workspace")
		setMembers(ws, members("alice"))

		Eventually(exists(carol1), timeout, poll).Should(BeFalse())
		Eventually(exists(carol2), timeout, poll).Should(BeFalse())
		// The next snapshot no longer holds carol's prefixes: gatewayd stops authenticating them.
		Eventually(servedPrefixes(ns), timeout, poll).Should(ConsistOf("mgw_alice0000001", "mgw_teamkey00001"))
		Eventually(carolStatus, timeout, poll).Should(Equal(http.StatusUnauthorized), "gatewayd no longer authenticates carol's key")
		Expect(exists(alice)()).To(BeTrue(), "a listed member keeps her key")
		Expect(exists(teamKey)()).To(BeTrue(), "a team key the removed member created stays")
		Expect(exists(team)()).To(BeTrue())

		Eventually(eventsFor(ns, "Workspace", "default"), timeout, poll).Should(ContainElements(
			"KeyRevoked: Deleted PERSONAL WorkspaceAPIKey carol-laptop of user carol: Workspace default no longer lists the user in spec.members.",
			"KeyRevoked: Deleted PERSONAL WorkspaceAPIKey carol-ci of user carol: Workspace default no longer lists the user in spec.members.",
		))
		for _, e := range eventsFor(ns, "Workspace", "default")(Default) {
			for _, k := range []*gatewayv1.WorkspaceAPIKey{carol1, carol2} {
				Expect(e).NotTo(ContainSubstring(k.Spec.Hash), "an Event never carries key material")
			}
		}
	})

	It("leaves keys alone when a member leaves a Team only", func() {
		ns := newNamespace()
		ws := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"},
			Spec: gatewayv1.WorkspaceSpec{Members: members("bob")}}
		Expect(k8s.Create(ctx, ws)).To(Succeed())
		team := &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ml"}, Spec: gatewayv1.TeamSpec{
			DisplayName: "ML", Members: []gatewayv1.TeamMember{{UserID: "bob", Role: gatewayv1.TeamRoleAdmin}}}}
		Expect(k8s.Create(ctx, team)).To(Succeed())
		bob := personalKey(ns, "bob-laptop", "bob", "mgw_bob000000001")
		Expect(k8s.Create(ctx, bob)).To(Succeed())
		Eventually(servedPrefixes(ns), timeout, poll).Should(ConsistOf("mgw_bob000000001"))

		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(team), team)).To(Succeed())
		team.Spec.Members = nil
		Expect(k8s.Update(ctx, team)).To(Succeed())
		// Once the snapshot shows the team without bob, every reconciler has seen the change.
		Eventually(func(g Gomega) int {
			s, _, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Teams).To(HaveLen(1))
			return len(s.Teams[0].Members)
		}, timeout, poll).Should(BeZero())
		Expect(exists(bob)()).To(BeTrue())
		Expect(servedPrefixes(ns)(Default)).To(ConsistOf("mgw_bob000000001"))
	})

	It("revokes a PERSONAL key written for a non-member, and revokes nothing while membership is not adopted", func() {
		ns := newNamespace()
		ws := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}
		Expect(k8s.Create(ctx, ws)).To(Succeed())
		dana := personalKey(ns, "dana-laptop", "dana", "mgw_dana00000001")
		Expect(k8s.Create(ctx, dana)).To(Succeed())
		// No spec.members: the workspace has not adopted membership, so dana's key is served as it is.
		Eventually(servedPrefixes(ns), timeout, poll).Should(ConsistOf("mgw_dana00000001"))
		Expect(exists(dana)()).To(BeTrue())

		By("adopting membership without dana")
		setMembers(ws, members("erin"))
		Eventually(exists(dana), timeout, poll).Should(BeFalse())

		By("writing a PERSONAL key for someone who is not a member")
		frank := personalKey(ns, "frank-laptop", "frank", "mgw_frank0000001")
		Expect(k8s.Create(ctx, frank)).To(Succeed())
		Eventually(exists(frank), timeout, poll).Should(BeFalse())
		erin := personalKey(ns, "erin-laptop", "erin", "mgw_erin00000001")
		Expect(k8s.Create(ctx, erin)).To(Succeed())
		Eventually(servedPrefixes(ns), timeout, poll).Should(ConsistOf("mgw_erin00000001"))
		Expect(exists(erin)()).To(BeTrue())
	})
})

var _ = Describe("Key creator migration", func() {
	It("copies the created-by annotation into spec.createdBy once", func() {
		ns := newNamespace()
		byUser := workspaceKey(ns, "by-user", gatewayv1.KeyTypeInvoke, "mgw_byuser000001")
		byUser.Annotations = map[string]string{gatewayv1.AnnotationCreatedBy: "user:alice"}
		byKey := workspaceKey(ns, "by-key", gatewayv1.KeyTypeManageAll, "mgw_bykey0000001")
		byKey.Annotations = map[string]string{gatewayv1.AnnotationCreatedBy: "key:mgw_manager00001"}
		already := workspaceKey(ns, "already", gatewayv1.KeyTypeInvoke, "mgw_already00001")
		already.Annotations = map[string]string{gatewayv1.AnnotationCreatedBy: "user:alice"}
		already.Spec.CreatedBy = &gatewayv1.KeyCreator{UserID: "bob"}
		odd := workspaceKey(ns, "odd", gatewayv1.KeyTypeInvoke, "mgw_odd000000001")
		odd.Annotations = map[string]string{gatewayv1.AnnotationCreatedBy: "somebody"}
		for _, k := range []*gatewayv1.WorkspaceAPIKey{byUser, byKey, already, odd} {
			Expect(k8s.Create(ctx, k)).To(Succeed())
		}
		Eventually(func(g Gomega) *gatewayv1.KeyCreator {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(byUser), byUser)).To(Succeed())
			return byUser.Spec.CreatedBy
		}, timeout, poll).Should(Equal(&gatewayv1.KeyCreator{UserID: "alice"}))
		Eventually(func(g Gomega) *gatewayv1.KeyCreator {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(byKey), byKey)).To(Succeed())
			return byKey.Spec.CreatedBy
		}, timeout, poll).Should(Equal(&gatewayv1.KeyCreator{APIKeyPrefix: "mgw_manager00001"}))
		Eventually(eventsFor(ns, "WorkspaceAPIKey", "by-user"), timeout, poll).Should(ContainElement(HavePrefix("CreatedByMigrated: ")))
		Eventually(eventsFor(ns, "WorkspaceAPIKey", "odd"), timeout, poll).Should(ContainElement(HavePrefix("CreatedByNotMigrated: ")))

		// Every key is served throughout, the one with an unreadable annotation without a creator.
		Eventually(servedPrefixes(ns), timeout, poll).Should(ConsistOf(
			"mgw_byuser000001", "mgw_bykey0000001", "mgw_already00001", "mgw_odd000000001"))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(already), already)).To(Succeed())
		Expect(already.Spec.CreatedBy).To(Equal(&gatewayv1.KeyCreator{UserID: "bob"}), "a set createdBy is never rewritten")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(odd), odd)).To(Succeed())
		Expect(odd.Spec.CreatedBy).To(BeNil())
	})

	It("keeps serving a legacy key that breaks the new scope rules, with its creator from the annotation", func() {
		ns := newNamespace()
		legacy := workspaceKey(ns, "legacy", gatewayv1.KeyTypeManageAll, "mgw_legacy000001")
		legacy.Spec.Models = []string{"sentiment"} // models alone on a WORKSPACE_MANAGE_ALL key: allowed before issue 14
		Expect(k8s.Create(ctx, legacy.DeepCopy())).NotTo(Succeed(), "the current rules refuse such a key")

		By("storing it under the rules of the time: the test drops the WorkspaceAPIKey CEL rules for one create")
		withoutKeyRules(func() {
			Eventually(func() error { return k8s.Create(ctx, legacy.DeepCopy()) }, timeout, poll).Should(Succeed())
		})
		// The annotation goes on under the current rules, so the migration runs under them too. A metadata write
		// of a legacy key is admitted: ratcheting does not re-judge its unchanged spec.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(legacy), legacy)).To(Succeed())
		legacy.Annotations = map[string]string{gatewayv1.AnnotationCreatedBy: "user:alice"}
		Expect(k8s.Update(ctx, legacy)).To(Succeed())

		// The key reconciler's status writes pass (ratcheting: the unchanged spec is not re-judged), so the key
		// is Ready and served, with its creator read from the annotation.
		Eventually(func(g Gomega) string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(legacy), legacy)).To(Succeed())
			return readyReason(legacy.Status.Conditions)
		}, timeout, poll).Should(Equal("True/Ready"))
		Eventually(servedKey(ns, "mgw_legacy000001"), timeout, poll).Should(And(
			Not(BeNil()), HaveField("CreatedBy", Equal(&snapshot.KeyCreator{UserID: "alice"})),
			HaveField("Models", Equal([]string{"sentiment"}))))
		// The manager does not rewrite its scope: the patch of spec.createdBy is refused, and said so.
		Eventually(eventsFor(ns, "WorkspaceAPIKey", "legacy"), timeout, poll).Should(ContainElement(And(
			HavePrefix("CreatedByNotMigrated: "), ContainSubstring("models alone scopes WORKSPACE_INVOKE"))))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(legacy), legacy)).To(Succeed())
		Expect(legacy.Spec.CreatedBy).To(BeNil())
		Expect(legacy.Spec.Models).To(Equal([]string{"sentiment"}))
	})
})

var _ = Describe("Team status", func() {
	It("is Ready, and reports a second default that a race let in until the first one goes", func() {
		ns := newNamespace()
		first := &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ml"},
			Spec: gatewayv1.TeamSpec{DisplayName: "ML", Default: true}}
		Expect(k8s.Create(ctx, first)).To(Succeed())
		teamReady := func(t *gatewayv1.Team) func(Gomega) string {
			return func(g Gomega) string {
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(t), t)).To(Succeed())
				g.Expect(t.Status.ObservedGeneration).To(Equal(t.Generation))
				return readyReason(t.Status.Conditions)
			}
		}
		Eventually(teamReady(first), timeout, poll).Should(Equal("True/Ready"))
		// This suite runs no webhooks, which would refuse the second default; a race between two admissions can
		// store it all the same.
		second := &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
			Spec: gatewayv1.TeamSpec{DisplayName: "Web", Default: true}}
		Expect(k8s.Create(ctx, second)).To(Succeed())
		Eventually(teamReady(second), timeout, poll).Should(Equal("False/" + gatewayv1.ReasonDuplicateDefault))
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Eventually(teamReady(second), timeout, poll).Should(Equal("True/Ready"))
	})
})

// withoutKeyRules runs fn while the WorkspaceAPIKey CRD has no CEL rules on its spec, then puts them back and
// waits until the API server enforces them again. Only for storing an object as an older version of the CRD
// allowed it.
func withoutKeyRules(fn func()) {
	GinkgoHelper()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	key := client.ObjectKey{Name: "workspaceapikeys.gateway.modelgate.io"}
	Expect(k8s.Get(ctx, key, crd)).To(Succeed())
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	v0 := versions[0].(map[string]any)
	rules, found, err := unstructured.NestedSlice(v0, "schema", "openAPIV3Schema", "properties", "spec", "x-kubernetes-validations")
	Expect(err).NotTo(HaveOccurred())
	Expect(found).To(BeTrue())
	setRules := func(r []any) {
		Eventually(func() error {
			if err := k8s.Get(ctx, key, crd); err != nil {
				return err
			}
			versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
			v0 := versions[0].(map[string]any)
			if r == nil {
				unstructured.RemoveNestedField(v0, "schema", "openAPIV3Schema", "properties", "spec", "x-kubernetes-validations")
			} else if err := unstructured.SetNestedSlice(v0, r, "schema", "openAPIV3Schema", "properties", "spec", "x-kubernetes-validations"); err != nil {
				return err
			}
			versions[0] = v0
			if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
				return err
			}
			return k8s.Update(ctx, crd)
		}, timeout, poll).Should(Succeed())
	}
	setRules(nil)
	defer func() {
		setRules(rules)
		// Wait until a key breaking a rule is refused again, so no later spec sees the relaxed schema.
		probe := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "probe-"},
			Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypePersonal}}
		Eventually(func() bool {
			err := k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll)
			return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "owner is required")
		}, timeout, poll).Should(BeTrue())
	}()
	fn()
}

// setMembers writes ws's spec.members, reading it again on a conflict: the manager writes its status meanwhile.
func setMembers(ws *gatewayv1.Workspace, m []gatewayv1.WorkspaceMember) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(ws), ws); err != nil {
			return err
		}
		ws.Spec.Members = m
		return k8s.Update(ctx, ws)
	})).To(Succeed())
}
