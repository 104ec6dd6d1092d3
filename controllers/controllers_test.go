package controllers_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/translate"
)

const (
	timeout = 30 * time.Second
	poll    = 100 * time.Millisecond
)

func group(ns, name, parent string, mode gatewayv1.LimitEnforcement, models ...gatewayv1.ModelConfig) *gatewayv1.Group {
	g := &gatewayv1.Group{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.GroupSpec{
			ExternalEntityID: "ext-" + name,
			Models:           models,
			Hierarchy:        gatewayv1.Hierarchy{LimitEnforcement: mode},
		},
	}
	if parent != "" {
		g.Spec.Hierarchy.ParentGroupID = ptr.To(parent)
	}
	return g
}

func model(slug string, rate ...gatewayv1.Limit) gatewayv1.ModelConfig {
	return gatewayv1.ModelConfig{Slug: slug, RateLimits: rate}
}

func limit(t gatewayv1.LimitType, u gatewayv1.LimitUnit, threshold int64) gatewayv1.Limit {
	return gatewayv1.Limit{Type: t, Unit: u, Threshold: threshold}
}

func hashKey(ns, name, groupID, prefix string) *gatewayv1.APIKey {
	sum := sha256.Sum256([]byte(prefix + ".secret-of-" + name))
	return &gatewayv1.APIKey{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.APIKeySpec{GroupID: groupID,
			KeySource: gatewayv1.KeySource{Prefix: prefix, Hash: hex.EncodeToString(sum[:])}},
	}
}

// getGroup fetches a group for Eventually.
func getGroup(ns, name string) func(Gomega) *gatewayv1.Group {
	return func(g Gomega) *gatewayv1.Group {
		out := &gatewayv1.Group{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, out)).To(Succeed())
		return out
	}
}

func readyReason(conds []metav1.Condition) string {
	c := meta.FindStatusCondition(conds, gatewayv1.ConditionReady)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

// rateLimitsOf returns the effective rate limits of slug in a group's status as "TYPE/UNIT=threshold@source".
func rateLimitsOf(g *gatewayv1.Group, slug string) []string {
	var out []string
	for _, m := range g.Status.EffectiveModels {
		if m.Slug == slug {
			for _, l := range m.RateLimits {
				out = append(out, fmt.Sprintf("%s/%s=%d@%s", l.Type, l.Unit, l.Threshold, l.SourceGroup))
			}
		}
	}
	return out
}

func randomAlnum(n int) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	for i := range b {
		x, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		Expect(err).NotTo(HaveOccurred())
		b[i] = alphabet[x.Int64()]
	}
	return string(b)
}

var _ = Describe("Group reconciler", func() {
	It("keeps effectiveModels of an INDEPENDENT subtree in step with an ancestor's limits, down to grandchildren", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "root", "", gatewayv1.EnforcementIndependent,
			model("demo/echo", limit(gatewayv1.LimitTypeRequest, gatewayv1.UnitMinute, 600))))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "child", "root", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		// The middle group does not list demo/echo, so its own status never changes: the grandchild must be
		// reached from the root directly, not through a status change of its parent.
		Expect(k8s.Create(ctx, group(ns, "middle", "root", gatewayv1.EnforcementIndependent, model("demo/other")))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "grandchild", "middle", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())

		Eventually(func(g Gomega) {
			gc := getGroup(ns, "grandchild")(g)
			g.Expect(readyReason(gc.Status.Conditions)).To(Equal("True/Ready"))
			g.Expect(gc.Status.Depth).To(BeEquivalentTo(3))
			g.Expect(gc.Status.RootGroupID).To(Equal("root"))
			g.Expect(rateLimitsOf(gc, "demo/echo")).To(Equal([]string{"REQUEST/MINUTE=600@root"}))
		}, timeout, poll).Should(Succeed())
		middle := getGroup(ns, "middle")(Default)

		root := getGroup(ns, "root")(Default)
		root.Spec.Models[0].RateLimits[0].Threshold = 900
		Expect(k8s.Update(ctx, root)).To(Succeed())

		for _, name := range []string{"child", "grandchild"} {
			Eventually(func(g Gomega) []string {
				return rateLimitsOf(getGroup(ns, name)(g), "demo/echo")
			}, timeout, poll).Should(Equal([]string{"REQUEST/MINUTE=900@root"}), name)
		}
		Expect(getGroup(ns, "middle")(Default).ResourceVersion).To(Equal(middle.ResourceVersion),
			"the middle group's status had nothing to change")
	})

	It("lists every ancestor limit in a CASCADING tree", func() {
		ns := newNamespace()
		tok := func(n int64) gatewayv1.Limit { return limit(gatewayv1.LimitTypeToken, gatewayv1.UnitMinute, n) }
		Expect(k8s.Create(ctx, group(ns, "root", "", gatewayv1.EnforcementCascading, model("demo/echo", tok(1000))))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "child", "root", gatewayv1.EnforcementCascading, model("demo/echo", tok(500))))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "grandchild", "child", gatewayv1.EnforcementCascading, model("demo/echo", tok(100))))).To(Succeed())

		Eventually(func(g Gomega) []string {
			return rateLimitsOf(getGroup(ns, "grandchild")(g), "demo/echo")
		}, timeout, poll).Should(Equal([]string{
			"TOKEN/MINUTE=100@grandchild", "TOKEN/MINUTE=500@child", "TOKEN/MINUTE=1000@root",
		}))
	})

	It("brings a child applied before its parent to Ready once the parent exists", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "early-child", "late-parent", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		Eventually(func(g Gomega) string {
			return readyReason(getGroup(ns, "early-child")(g).Status.Conditions)
		}, timeout, poll).Should(Equal("False/" + gatewayv1.ReasonParentNotFound))
		Eventually(func(g Gomega) []string {
			s, _, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			return groupIDs(s)
		}, timeout, poll).Should(BeEmpty())

		Expect(k8s.Create(ctx, group(ns, "late-parent", "", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		Eventually(func(g Gomega) {
			child := getGroup(ns, "early-child")(g)
			g.Expect(readyReason(child.Status.Conditions)).To(Equal("True/Ready"))
			g.Expect(child.Status.Depth).To(BeEquivalentTo(2))
		}, timeout, poll).Should(Succeed())
		Eventually(func(g Gomega) []string {
			s, _, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			return groupIDs(s)
		}, timeout, poll).Should(Equal([]string{"early-child", "late-parent"}))
	})

	It("reports the newer of two groups with one external id", func() {
		ns := newNamespace()
		first := group(ns, "a-first", "", gatewayv1.EnforcementIndependent, model("demo/echo"))
		first.Spec.ExternalEntityID = "shared"
		Expect(k8s.Create(ctx, first)).To(Succeed())
		second := group(ns, "b-second", "", gatewayv1.EnforcementIndependent, model("demo/echo"))
		second.Spec.ExternalEntityID = "shared"
		Expect(k8s.Create(ctx, second)).To(Succeed())

		Eventually(func(g Gomega) string {
			return readyReason(getGroup(ns, "b-second")(g).Status.Conditions)
		}, timeout, poll).Should(Equal("False/" + gatewayv1.ReasonDuplicateExternal))
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Eventually(func(g Gomega) string {
			return readyReason(getGroup(ns, "b-second")(g).Status.Conditions)
		}, timeout, poll).Should(Equal("True/Ready"))
	})

	It("drops a deleted group's subtree from the snapshot at once, then deletes the subtree and its keys", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "root", "", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "child", "root", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "grandchild", "child", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		Expect(k8s.Create(ctx, hashKey(ns, "root-key", "root", "mgk_RootRootRoot"))).To(Succeed())
		Expect(k8s.Create(ctx, hashKey(ns, "child-key", "child", "mgk_ChildChildCh"))).To(Succeed())
		// Something else holds on to this key, so the cascade cannot finish until it lets go.
		held := hashKey(ns, "grandchild-key", "grandchild", "mgk_GrandGrandGr")
		held.Finalizers = []string{"example.com/hold"}
		Expect(k8s.Create(ctx, held)).To(Succeed())

		var before int64
		Eventually(func(g Gomega) {
			s, v, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(groupIDs(s)).To(Equal([]string{"child", "grandchild", "root"}))
			g.Expect(keyIDs(s)).To(Equal([]string{"child-key", "grandchild-key", "root-key"}))
			before = v
		}, timeout, poll).Should(Succeed())

		Expect(k8s.Delete(ctx, &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "child"}})).To(Succeed())

		By("revoking in the snapshot while the finalizers still wait")
		Eventually(func(g Gomega) {
			s, v, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(BeNumerically(">", before))
			g.Expect(groupIDs(s)).To(Equal([]string{"root"}))
			g.Expect(keyIDs(s)).To(Equal([]string{"root-key"}))
		}, timeout, poll).Should(Succeed())
		Eventually(func(g Gomega) string {
			return readyReason(getGroup(ns, "child")(g).Status.Conditions)
		}, timeout, poll).Should(Equal("False/" + gatewayv1.ReasonDeleting))

		By("removing the subtree once nothing holds it")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(held), held)).To(Succeed())
		held.Finalizers = nil
		Expect(k8s.Update(ctx, held)).To(Succeed())
		for _, obj := range []client.Object{
			&gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "child"}},
			&gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "grandchild"}},
			&gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "child-key"}},
			&gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "grandchild-key"}},
		} {
			Eventually(func() bool {
				return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj))
			}, timeout, poll).Should(BeTrue(), "%s should be gone", obj.GetName())
		}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "root"}, &gatewayv1.Group{})).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "root-key"}, &gatewayv1.APIKey{})).To(Succeed())
	})
})

var _ = Describe("Key reconcilers", func() {
	It("mints an APIKey into a Secret whose key hashes to status.hash", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "acme", "", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		key := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "minted"}, Spec: gatewayv1.APIKeySpec{GroupID: "acme"}}
		Expect(k8s.Create(ctx, key)).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(key), key)).To(Succeed())
			g.Expect(readyReason(key.Status.Conditions)).To(Equal("True/Ready"))
		}, timeout, poll).Should(Succeed())
		Expect(key.Status.SecretName).To(Equal("minted-key"))

		var secret corev1.Secret
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minted-key"}, &secret)).To(Succeed())
		plaintext := string(secret.Data["api_key"])
		Expect(plaintext).To(MatchRegexp(`^mgk_[0-9A-Za-z]{12}\.[0-9A-Za-z]{32}$`))
		sum := sha256.Sum256([]byte(plaintext))
		Expect(key.Status.Hash).To(Equal(hex.EncodeToString(sum[:])))
		Expect(key.Status.Prefix).To(Equal(plaintext[:16]))
		Expect(secret.OwnerReferences).To(ContainElement(HaveField("UID", key.UID)))
		for _, c := range key.Status.Conditions {
			Expect(c.Message).NotTo(ContainSubstring(plaintext[17:]), "the secret must never reach status")
		}

		Eventually(func(g Gomega) {
			s, _, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.APIKeys).To(ConsistOf(snapshot.APIKey{
				ID: "minted", Prefix: plaintext[:16], Hash: key.Status.Hash, GroupID: "acme",
			}))
		}, timeout, poll).Should(Succeed())

		By("never overwriting the minted Secret on later passes")
		key.Spec.DisplayName = "renamed"
		Expect(k8s.Update(ctx, key)).To(Succeed())
		Consistently(func(g Gomega) string {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minted-key"}, &secret)).To(Succeed())
			return string(secret.Data["api_key"])
		}, 2*time.Second, poll).Should(Equal(plaintext))
	})

	It("mints a WorkspaceAPIKey with the mgw_ prefix", func() {
		ns := newNamespace()
		key := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admin"},
			Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAll}}
		Expect(k8s.Create(ctx, key)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(key), key)).To(Succeed())
			g.Expect(readyReason(key.Status.Conditions)).To(Equal("True/Ready"))
		}, timeout, poll).Should(Succeed())
		var secret corev1.Secret
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "admin-key"}, &secret)).To(Succeed())
		Expect(string(secret.Data["api_key"])).To(HavePrefix("mgw_"))
		sum := sha256.Sum256(secret.Data["api_key"])
		Expect(key.Status.Hash).To(Equal(hex.EncodeToString(sum[:])))
	})

	It("derives prefix and hash from a referenced Secret and follows its rotation", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, group(ns, "acme", "", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		key := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gitops"},
			Spec: gatewayv1.APIKeySpec{GroupID: "acme", KeySource: gatewayv1.KeySource{
				SecretRef: &gatewayv1.SecretKeySelector{Name: "gitops-key"}}}}
		Expect(k8s.Create(ctx, key)).To(Succeed())
		Eventually(func(g Gomega) string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(key), key)).To(Succeed())
			return readyReason(key.Status.Conditions)
		}, timeout, poll).Should(Equal("False/" + gatewayv1.ReasonSecretNotFound))

		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gitops-key"},
			Data: map[string][]byte{"api_key": []byte("too-short")}}
		Expect(k8s.Create(ctx, secret)).To(Succeed())
		Eventually(func(g Gomega) string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(key), key)).To(Succeed())
			return readyReason(key.Status.Conditions)
		}, timeout, poll).Should(Equal("False/" + gatewayv1.ReasonSecretInvalid))
		Expect(key.Status.Hash).To(BeEmpty())

		for _, plaintext := range []string{"byok" + randomAlnum(40), "byok" + randomAlnum(40)} {
			secret.Data["api_key"] = []byte(plaintext)
			Expect(k8s.Update(ctx, secret)).To(Succeed())
			sum := sha256.Sum256([]byte(plaintext))
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(key), key)).To(Succeed())
				g.Expect(readyReason(key.Status.Conditions)).To(Equal("True/Ready"))
				g.Expect(key.Status.Hash).To(Equal(hex.EncodeToString(sum[:])))
				g.Expect(key.Status.Prefix).To(Equal(plaintext[:16]))
			}, timeout, poll).Should(Succeed())
		}
	})

	It("reports a missing group and a duplicate prefix", func() {
		ns := newNamespace()
		orphan := hashKey(ns, "orphan", "nowhere", "mgk_OrphanOrphan")
		Expect(k8s.Create(ctx, orphan)).To(Succeed())
		Eventually(func(g Gomega) string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(orphan), orphan)).To(Succeed())
			return readyReason(orphan.Status.Conditions)
		}, timeout, poll).Should(Equal("False/" + gatewayv1.ReasonGroupNotFound))

		Expect(k8s.Create(ctx, group(ns, "acme", "", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		first := hashKey(ns, "a-first", "acme", "mgk_SharedShared")
		Expect(k8s.Create(ctx, first)).To(Succeed())
		second := hashKey(ns, "b-second", "acme", "mgk_SharedShared")
		Expect(k8s.Create(ctx, second)).To(Succeed())
		Eventually(func(g Gomega) []string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(first), first)).To(Succeed())
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
			return []string{readyReason(first.Status.Conditions), readyReason(second.Status.Conditions)}
		}, timeout, poll).Should(Equal([]string{"True/Ready", "False/" + gatewayv1.ReasonDuplicatePrefix}))
		Eventually(func(g Gomega) []string {
			s, _, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			return keyIDs(s)
		}, timeout, poll).Should(Equal([]string{"a-first"}))

		By("handing the prefix to the newer key once the older is revoked")
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Eventually(func(g Gomega) string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
			return readyReason(second.Status.Conditions)
		}, timeout, poll).Should(Equal("True/Ready"))
	})
})

var _ = Describe("Endpoint and Workspace reconcilers", func() {
	It("reports a duplicate slug and records the published snapshot version on the Workspace", func() {
		ns := newNamespace()
		ep := func(name string) *gatewayv1.Endpoint {
			return &gatewayv1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: gatewayv1.EndpointSpec{Slug: "demo/echo", Targets: []gatewayv1.EndpointTarget{
					{Provider: gatewayv1.ProviderOpenAI, BaseURL: "http://127.0.0.1:9999/v1"}}}}
		}
		Expect(k8s.Create(ctx, ep("a-echo"))).To(Succeed())
		Expect(k8s.Create(ctx, ep("b-echo"))).To(Succeed())
		Eventually(func(g Gomega) string {
			e := &gatewayv1.Endpoint{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b-echo"}, e)).To(Succeed())
			return readyReason(e.Status.Conditions)
		}, timeout, poll).Should(Equal("False/" + gatewayv1.ReasonDuplicateSlug))

		ws := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}
		Expect(k8s.Create(ctx, ws)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ws), ws)).To(Succeed())
			s, v, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Workspace.Name).To(Equal("default"))
			g.Expect(ws.Status.SnapshotVersion).To(Equal(v))
			g.Expect(readyReason(ws.Status.Conditions)).To(Equal("True/Ready"))
			g.Expect(s.Endpoints).To(HaveLen(1))
			g.Expect(s.Endpoints[0].ID).To(Equal("a-echo"))
		}, timeout, poll).Should(Succeed())
	})
})

var _ = Describe("Endpoint targets", func() {
	It("counts an Endpoint's targets into status.targetCount, which kubectl get shows as Targets", func() {
		ns := newNamespace()
		e := &gatewayv1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chat"},
			Spec: gatewayv1.EndpointSpec{Slug: "chat/llama", Targets: []gatewayv1.EndpointTarget{
				{Provider: gatewayv1.ProviderOpenAI, BaseURL: "http://127.0.0.1:9997/v1"},
				{Name: "b", Provider: gatewayv1.ProviderOpenAI, BaseURL: "http://127.0.0.1:9998/v1", Priority: 1}}}}
		Expect(k8s.Create(ctx, e)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
			g.Expect(e.Status.TargetCount).To(Equal(int32(2)))
		}, timeout, poll).Should(Succeed())

		out, _, err := kubectl("get", "endpoints.gateway.modelgate.io", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		table, err := io.ReadAll(out)
		Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(strings.TrimSpace(string(table)), "\n")
		Expect(lines).To(HaveLen(2), "%q", lines)
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "READY", "SLUG", "TARGETS", "UPSTREAM", "AGE"}))
		Expect(strings.Fields(lines[1])[:5]).To(Equal([]string{"chat", "True", "chat/llama", "2", "http://127.0.0.1:9997/v1"}))

		e.Spec.Targets = e.Spec.Targets[:1]
		Expect(k8s.Update(ctx, e)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(e), e)).To(Succeed())
			g.Expect(e.Status.TargetCount).To(Equal(int32(1)))
		}, timeout, poll).Should(Succeed())
	})
})

var _ = Describe("Snapshot materializer", func() {
	It("keeps the published snapshot equal to a full translation through a sequence of changes", func() {
		ns := newNamespace()
		cascading := gatewayv1.EnforcementCascading
		rpm := func(n int64) gatewayv1.ModelConfig {
			return model("demo/echo", limit(gatewayv1.LimitTypeRequest, gatewayv1.UnitMinute, n))
		}
		// Each step changes the workspace through the API server; the manager's incremental pass must then publish
		// exactly what translate.Translate makes of the objects as stored.
		steps := []struct {
			what string
			do   func()
		}{{"a CASCADING tree with keys", func() {
			Expect(k8s.Create(ctx, group(ns, "root", "", cascading, rpm(100)))).To(Succeed())
			Expect(k8s.Create(ctx, group(ns, "team-a", "root", cascading, rpm(50)))).To(Succeed())
			Expect(k8s.Create(ctx, group(ns, "team-b", "root", cascading, rpm(40)))).To(Succeed())
			Expect(k8s.Create(ctx, group(ns, "leaf-a", "team-a", cascading, rpm(10)))).To(Succeed())
			Expect(k8s.Create(ctx, hashKey(ns, "key-a", "leaf-a", "mgk_KeyAKeyAKeyA"))).To(Succeed())
			Expect(k8s.Create(ctx, hashKey(ns, "key-b", "team-b", "mgk_KeyBKeyBKeyB"))).To(Succeed())
		}}, {"a team's limit, which its leaf inherits", func() {
			team := getGroup(ns, "team-a")(Default)
			team.Spec.Models = []gatewayv1.ModelConfig{rpm(20)}
			Expect(k8s.Update(ctx, team)).To(Succeed())
		}}, {"a group and key whose parent comes later, then the parent", func() {
			Expect(k8s.Create(ctx, group(ns, "early", "late", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
			Expect(k8s.Create(ctx, hashKey(ns, "key-early", "early", "mgk_EarlyEarlyEa"))).To(Succeed())
			Expect(k8s.Create(ctx, group(ns, "late", "", gatewayv1.EnforcementIndependent, model("demo/echo")))).To(Succeed())
		}}, {"a newer group claiming team-a's external id, then team-a deleted", func() {
			dup := group(ns, "dup", "", gatewayv1.EnforcementIndependent, model("demo/echo"))
			dup.Spec.ExternalEntityID = "ext-team-a"
			Expect(k8s.Create(ctx, dup)).To(Succeed())
			Expect(k8s.Delete(ctx, &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-a"}})).To(Succeed())
		}}, {"a newer key on key-b's prefix, then key-b revoked", func() {
			Expect(k8s.Create(ctx, hashKey(ns, "key-b2", "late", "mgk_KeyBKeyBKeyB"))).To(Succeed())
			Expect(k8s.Delete(ctx, &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "key-b"}})).To(Succeed())
		}}}
		for _, step := range steps {
			By(step.what)
			step.do()
			Eventually(func(g Gomega) {
				s, _, _, err := readSnapshot(ns)
				g.Expect(err).NotTo(HaveOccurred())
				got, err := json.Marshal(s)
				g.Expect(err).NotTo(HaveOccurred())
				want, err := json.Marshal(fullTranslation(g, ns))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(got)).To(Equal(string(want)))
			}, timeout, poll).Should(Succeed())
		}
		s, _, _, err := readSnapshot(ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(groupIDs(s)).To(Equal([]string{"dup", "early", "late", "root", "team-b"}))
		Expect(keyIDs(s)).To(Equal([]string{"key-b2", "key-early"}))
	})

	It("splits a workspace larger than one ConfigMap into chunks that reassemble", func() {
		ns := newNamespace()
		// Random slugs barely compress, so 60 groups of 256 slugs make well over 900 KiB of gzip.
		const groups = 60
		for i := range groups {
			models := make([]gatewayv1.ModelConfig, 256)
			for j := range models {
				models[j] = gatewayv1.ModelConfig{Slug: randomAlnum(120)}
			}
			Expect(k8s.Create(ctx, group(ns, fmt.Sprintf("big-%02d", i), "", gatewayv1.EnforcementIndependent, models...))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			s, _, chunks, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Groups).To(HaveLen(groups))
			g.Expect(chunks).To(BeNumerically(">=", 2))
			for _, grp := range s.Groups {
				g.Expect(grp.Models).To(HaveLen(256))
			}
		}, 2*timeout, poll).Should(Succeed())

		By("rewriting only the part a one-group change touches, and deleting the part it replaced")
		partNames := func(g Gomega) map[string]bool {
			var cms corev1.ConfigMapList
			g.Expect(k8s.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{snapshot.LabelKey: snapshot.LabelChunk})).To(Succeed())
			out := map[string]bool{}
			for _, cm := range cms.Items {
				out[cm.Name] = true
			}
			return out
		}
		var before map[string]bool
		Eventually(func(g Gomega) {
			_, _, chunks, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			before = partNames(g)
			g.Expect(before).To(HaveLen(chunks))
		}, timeout, poll).Should(Succeed())
		changed := &gatewayv1.Group{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "big-07"}, changed)).To(Succeed())
		changed.Spec.Models[0].RateLimits = []gatewayv1.Limit{{Type: gatewayv1.LimitTypeRequest, Unit: gatewayv1.UnitMinute, Threshold: 5}}
		slug := changed.Spec.Models[0].Slug
		Expect(k8s.Update(ctx, changed)).To(Succeed())
		Eventually(func(g Gomega) {
			s, _, chunks, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			var got *snapshot.Group
			for i := range s.Groups {
				if s.Groups[i].ID == "big-07" {
					got = &s.Groups[i]
				}
			}
			g.Expect(got).NotTo(BeNil())
			limited := 0
			for _, m := range got.Models {
				if m.Slug == slug {
					limited = len(m.RateLimits)
				}
			}
			g.Expect(limited).To(Equal(1))
			after := partNames(g)
			g.Expect(after).To(HaveLen(chunks), "a replaced part is still there")
			fresh := 0
			for name := range after {
				if !before[name] {
					fresh++
				}
			}
			g.Expect(fresh).To(Equal(1), "parts written for a one-group change")
		}, 2*timeout, poll).Should(Succeed())

		By("going back inline, without stale chunks, when the workspace shrinks")
		Expect(k8s.DeleteAllOf(ctx, &gatewayv1.Group{}, client.InNamespace(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			s, _, chunks, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Groups).To(BeEmpty())
			g.Expect(chunks).To(Equal(0))
			var cms corev1.ConfigMapList
			g.Expect(k8s.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{snapshot.LabelKey: snapshot.LabelChunk})).To(Succeed())
			g.Expect(cms.Items).To(BeEmpty())
		}, 2*timeout, poll).Should(Succeed())
	})
})

// fullTranslation lists the workspace as stored and translates it whole, as the materializer did before it
// remembered its last pass.
func fullTranslation(g Gomega, ns string) *snapshot.Snapshot {
	var (
		ws     gatewayv1.WorkspaceList
		groups gatewayv1.GroupList
		keys   gatewayv1.APIKeyList
		wkeys  gatewayv1.WorkspaceAPIKeyList
		eps    gatewayv1.EndpointList
	)
	for _, l := range []client.ObjectList{&ws, &groups, &keys, &wkeys, &eps} {
		g.Expect(k8s.List(ctx, l, client.InNamespace(ns))).To(Succeed())
	}
	return translate.Translate(translate.Input{Namespace: ns, Workspaces: ws.Items, Groups: groups.Items, APIKeys: keys.Items,
		WorkspaceAPIKeys: wkeys.Items, Endpoints: eps.Items})
}

func groupIDs(s *snapshot.Snapshot) []string {
	out := []string{}
	for _, g := range s.Groups {
		out = append(out, g.ID)
	}
	return out
}

func keyIDs(s *snapshot.Snapshot) []string {
	out := []string{}
	for _, k := range s.APIKeys {
		out = append(out, k.ID)
	}
	// The snapshot sorts keys by prefix; compare them by id.
	slices.Sort(out)
	return out
}
