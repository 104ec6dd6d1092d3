package webhooks_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/apikey"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/webhooks"
)

const (
	indep   = gatewayv1.EnforcementIndependent
	cascade = gatewayv1.EnforcementCascading
	exceeds = "Child group exceeds parent group limit."
	// holdFinalizer keeps a deleted object around with a deletionTimestamp; envtest runs no controller that
	// would remove it.
	holdFinalizer = "test.modelgate.io/hold"
)

// countingReader reads the real API server and counts the lists, to show how much of a workspace a check reads.
type countingReader struct {
	client.Reader
	lists atomic.Int64
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists.Add(1)
	return r.Reader.List(ctx, list, opts...)
}

var _ = Describe("Group webhook", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("admits five levels and refuses a sixth", func() {
		parent := ""
		for i := 1; i <= 5; i++ {
			name := "g" + string(rune('0'+i))
			Expect(k8s.Create(ctx, group(ns, name, parent, indep))).To(Succeed())
			parent = name
		}
		err := k8s.Create(ctx, group(ns, "g6", "g5", indep))
		expectRefused(err, "spec.hierarchy.parentGroupID", "hierarchy would be 6 levels deep")
	})

	It("refuses a late parent whose waiting subtree would make the tree six levels deep", func() {
		Expect(k8s.Create(ctx, group(ns, "root", "", indep))).To(Succeed())
		parent := "late"
		for _, name := range []string{"c1", "c2", "c3", "c4"} {
			Expect(k8s.Create(ctx, group(ns, name, parent, indep))).To(Succeed(), "a missing parent is admitted")
			parent = name
		}
		err := k8s.Create(ctx, group(ns, "late", "root", indep))
		expectRefused(err, "spec.hierarchy.parentGroupID", "hierarchy would be 6 levels deep")
	})

	It("admits a child whose parent does not exist yet", func() {
		Expect(k8s.Create(ctx, group(ns, "orphan", "ghost", cascade, rateModel("m", gatewayv1.LimitTypeRequest, 1000)))).To(Succeed())
	})

	It("refuses a cycle", func() {
		Expect(k8s.Create(ctx, group(ns, "a", "b", indep))).To(Succeed())
		err := k8s.Create(ctx, group(ns, "b", "a", indep))
		expectRefused(err, "spec.hierarchy.parentGroupID", "may not contain a cycle")
	})

	It("refuses a child whose mode differs from the root's, in both directions", func() {
		Expect(k8s.Create(ctx, group(ns, "croot", "", cascade))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "iroot", "", indep))).To(Succeed())
		expectRefused(k8s.Create(ctx, group(ns, "c1", "croot", indep)),
			"spec.hierarchy.limitEnforcement", "must equal the limitEnforcement of the tree's root croot (CASCADING)")
		expectRefused(k8s.Create(ctx, group(ns, "c2", "iroot", cascade)),
			"spec.hierarchy.limitEnforcement", "must equal the limitEnforcement of the tree's root iroot (INDEPENDENT)")
	})

	It("refuses a cascading child above its parent with the exact message, and admits an equal one", func() {
		Expect(k8s.Create(ctx, group(ns, "root", "", cascade, rateModel("m", gatewayv1.LimitTypeRequest, 100)))).To(Succeed())
		child := group(ns, "child", "root", cascade, gatewayv1.ModelConfig{Slug: "a"}, rateModel("m", gatewayv1.LimitTypeRequest, 101))
		expectRefused(k8s.Create(ctx, child), "spec.models[1].rateLimits[0].threshold", exceeds)

		child.Spec.Models[1].RateLimits[0].Threshold = 100
		Expect(k8s.Create(ctx, child)).To(Succeed())
	})

	It("admits over-provisioning across cascading siblings", func() {
		Expect(k8s.Create(ctx, group(ns, "root", "", cascade, rateModel("m", gatewayv1.LimitTypeRequest, 100)))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "s1", "root", cascade, rateModel("m", gatewayv1.LimitTypeRequest, 90)))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "s2", "root", cascade, rateModel("m", gatewayv1.LimitTypeRequest, 90)))).To(Succeed())
	})

	It("refuses lowering a cascading ancestor below a descendant, by Update and by Patch", func() {
		root := group(ns, "root", "", cascade, rateModel("m", gatewayv1.LimitTypeRequest, 100))
		Expect(k8s.Create(ctx, root)).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "mid", "root", cascade, gatewayv1.ModelConfig{Slug: "m"}))).To(Succeed())
		leaf := group(ns, "leaf", "mid", cascade, rateModel("m", gatewayv1.LimitTypeRequest, 60))
		Expect(k8s.Create(ctx, leaf)).To(Succeed())

		lowered := root.DeepCopy()
		lowered.Spec.Models[0].RateLimits[0].Threshold = 50
		expectRefused(k8s.Update(ctx, lowered), "spec.models[0].rateLimits[0].threshold", exceeds)

		patch := client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"models":[{"slug":"m","rateLimits":[{"type":"REQUEST","unit":"MINUTE","threshold":50}]}]}}`))
		expectRefused(k8s.Patch(ctx, root.DeepCopy(), patch), "spec.models[0].rateLimits[0].threshold", exceeds)

		By("lowering the descendant first, as docs/limits.md \"The rules\" 6 tells the user to")
		leaf.Spec.Models[0].RateLimits[0].Threshold = 50
		Expect(k8s.Update(ctx, leaf)).To(Succeed())
		Expect(k8s.Patch(ctx, root.DeepCopy(), patch)).To(Succeed())
	})

	It("refuses a duplicate externalEntityID, and frees it once the holder is being deleted", func() {
		first := group(ns, "first", "", indep)
		first.Spec.ExternalEntityID = "cust-1"
		first.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, first)).To(Succeed())

		second := group(ns, "second", "", indep)
		second.Spec.ExternalEntityID = "cust-1"
		expectRefused(k8s.Create(ctx, second), "spec.externalEntityID", "must be unique")

		By("renaming an existing group onto a used id")
		third := group(ns, "third", "", indep)
		Expect(k8s.Create(ctx, third)).To(Succeed())
		third.Spec.ExternalEntityID = "cust-1"
		expectRefused(k8s.Update(ctx, third), "spec.externalEntityID", "must be unique")

		By("deleting the holder, which lingers on its finalizer")
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(first), first)).To(Succeed())
		Expect(first.DeletionTimestamp).NotTo(BeNil())
		Expect(k8s.Create(ctx, second)).To(Succeed())

		By("removing the finalizer of the deleting group, even though its id is now taken")
		first.Finalizers = nil
		Expect(k8s.Update(ctx, first)).To(Succeed())
	})

	It("admits a metadata-only update of a group that a race left in conflict", func() {
		// Two racing admissions can both store the same externalEntityID; the API server cannot be made to do
		// that on purpose, so the raced twin is handed to the validator directly, reading the real API server.
		Expect(k8s.Create(ctx, group(ns, "first", "", indep))).To(Succeed())
		v := &webhooks.GroupValidator{Reader: k8s}
		twin := group(ns, "twin", "", indep)
		twin.Spec.ExternalEntityID = "ext-first"
		_, err := v.ValidateCreate(ctx, twin)
		expectRefused(err, "spec.externalEntityID", "already used by Group first")

		labelled := twin.DeepCopy()
		labelled.Labels = map[string]string{"team": "a"}
		_, err = v.ValidateUpdate(ctx, twin, labelled)
		Expect(err).NotTo(HaveOccurred(), "a label change does not touch the conflicting field")

		renamed := twin.DeepCopy()
		renamed.Spec.ExternalEntityID = "ext-first-2"
		_, err = v.ValidateUpdate(ctx, twin, renamed)
		Expect(err).NotTo(HaveOccurred(), "moving off the conflict is admitted")
	})

	It("reads a lowered group's subtree only below children that do not already hold the lower limit", func() {
		limit := requestsPerMinute
		root := group(ns, "root", "", cascade, limit(100))
		Expect(k8s.Create(ctx, root)).To(Succeed())
		const shielding = 20
		for i := range shielding {
			child := fmt.Sprintf("c%d", i)
			Expect(k8s.Create(ctx, group(ns, child, "root", cascade, limit(50)))).To(Succeed())
			Expect(k8s.Create(ctx, group(ns, child+"-leaf", child, cascade, limit(40)))).To(Succeed())
		}
		// A child without the limit hides nothing: its own child may hold more than the new threshold.
		Expect(k8s.Create(ctx, group(ns, "open", "root", cascade, gatewayv1.ModelConfig{Slug: "m"}))).To(Succeed())
		deep := group(ns, "deep", "open", cascade, limit(80))
		Expect(k8s.Create(ctx, deep)).To(Succeed())

		reads := &countingReader{Reader: k8s}
		v := &webhooks.GroupValidator{Reader: reads}
		lowered := root.DeepCopy()
		lowered.Spec.Models[0].RateLimits[0].Threshold = 60
		_, err := v.ValidateUpdate(ctx, root, lowered)
		expectRefused(err, "spec.models[0].rateLimits[0].threshold", "descendant deep declares 80")
		// root's children, open's children, deep's children; not one read below the 20 children holding 50.
		Expect(reads.lists.Load()).To(BeEquivalentTo(3))

		By("below a shielding child's own limit, the child itself refuses it")
		lowered.Spec.Models[0].RateLimits[0].Threshold = 45
		_, err = v.ValidateUpdate(ctx, root, lowered)
		expectRefused(err, "spec.models[0].rateLimits[0].threshold", "declares 50")

		By("admitting the lowering once deep is under it, through the API server")
		deep.Spec.Models[0].RateLimits[0].Threshold = 60
		Expect(k8s.Update(ctx, deep)).To(Succeed())
		lowered.Spec.Models[0].RateLimits[0].Threshold = 60
		Expect(k8s.Update(ctx, lowered)).To(Succeed())

		By("a group created above existing groups reads its whole subtree: nothing there was admitted against it")
		Expect(k8s.Create(ctx, group(ns, "early", "late", cascade, limit(50)))).To(Succeed())
		Expect(k8s.Create(ctx, group(ns, "early-leaf", "early", cascade, limit(40)))).To(Succeed())
		reads.lists.Store(0)
		_, err = v.ValidateCreate(ctx, group(ns, "late", "", cascade, limit(100)))
		Expect(err).NotTo(HaveOccurred())
		// The external id check, then the children of late, early and early-leaf.
		Expect(reads.lists.Load()).To(BeEquivalentTo(4))
	})

	It("admits removing the finalizer of a deleting root whose child has since been raised above it", func() {
		root := group(ns, "root", "", cascade, rateModel("m", gatewayv1.LimitTypeRequest, 100))
		root.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, root)).To(Succeed())
		child := group(ns, "child", "root", cascade, rateModel("m", gatewayv1.LimitTypeRequest, 100))
		Expect(k8s.Create(ctx, child)).To(Succeed())

		Expect(k8s.Delete(ctx, root)).To(Succeed())
		By("a deleting parent no longer counts, so the child is as if its parent were missing")
		child.Spec.Models[0].RateLimits[0].Threshold = 500
		Expect(k8s.Update(ctx, child)).To(Succeed())

		letGo(root)
	})
})

var _ = Describe("APIKey webhook", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	key := func(name, prefix string, i int) *gatewayv1.APIKey {
		k := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		k.Spec.GroupID = "acme"
		k.Spec.Prefix = prefix
		k.Spec.Hash = hash64(i)
		return k
	}

	It("refuses a prefix another key holds in its spec", func() {
		Expect(k8s.Create(ctx, key("k1", "mgk_AAAAAAAAAAAA", 1))).To(Succeed())
		expectRefused(k8s.Create(ctx, key("k2", "mgk_AAAAAAAAAAAA", 2)), "spec.prefix", "must be unique among the APIKeys")
		Expect(k8s.Create(ctx, key("k3", "mgk_BBBBBBBBBBBB", 3))).To(Succeed())
	})

	It("refuses a prefix another key holds in its status", func() {
		brought := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "brought"}}
		brought.Spec.GroupID = "acme"
		brought.Spec.SecretRef = &gatewayv1.SecretKeySelector{Name: "acme-key"}
		Expect(k8s.Create(ctx, brought)).To(Succeed())
		brought.Status.Prefix = "user_key_0123456"
		Expect(k8s.Status().Update(ctx, brought)).To(Succeed())

		expectRefused(k8s.Create(ctx, key("k2", "user_key_0123456", 2)), "spec.prefix", "already used by APIKey brought")
	})

	It("keeps a deleted key's prefix as a tombstone: revocation is irreversible, in any group", func() {
		held := key("held", "mgk_CCCCCCCCCCCC", 1)
		held.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, held)).To(Succeed())
		Expect(k8s.Delete(ctx, held)).To(Succeed())
		expectRefused(k8s.Create(ctx, key("next", "mgk_CCCCCCCCCCCC", 2)), "spec.prefix", "was revoked")

		By("a replay of the revoked key itself, under another name and group, is refused too")
		replay := key("replayed", "mgk_CCCCCCCCCCCC", 1)
		replay.Spec.GroupID = "other-group"
		expectRefused(k8s.Create(ctx, replay), "spec.prefix", "was revoked")
		letGo(held)
		expectRefused(k8s.Create(ctx, key("held", "mgk_CCCCCCCCCCCC", 1)), "spec.prefix", "was revoked")
	})

	It("refuses a revoked REST key brought back through a Secret, for either kind of key (docs/security.md)", func() {
		plain := "mgk_" + strings.Repeat("Zq7x", 10)
		registered := key("registered", apikey.Prefix(plain), 0)
		registered.Spec.Hash = apikey.Hash(plain)
		Expect(k8s.Create(ctx, registered)).To(Succeed())
		Expect(k8s.Delete(ctx, registered)).To(Succeed())

		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "same-key"},
			Data: map[string][]byte{"api_key": []byte(plain + "\n")}})).To(Succeed())
		fed := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "revived"}}
		fed.Spec.GroupID = "acme"
		fed.Spec.SecretRef = &gatewayv1.SecretKeySelector{Name: "same-key"}
		expectRefused(k8s.Create(ctx, fed), "spec.secretRef", "was revoked")
		ws := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "revived"}}
		ws.Spec.Type = gatewayv1.KeyTypeInvoke
		ws.Spec.SecretRef = &gatewayv1.SecretKeySelector{Name: "same-key"}
		expectRefused(k8s.Create(ctx, ws), "spec.secretRef", "was revoked")

		By("a Secret holding another key is admitted")
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-key"},
			Data: map[string][]byte{"api_key": []byte("mgk_" + strings.Repeat("Wp3k", 10))}})).To(Succeed())
		fed.Spec.SecretRef.Name = "other-key"
		Expect(k8s.Create(ctx, fed)).To(Succeed())
	})
})

var _ = Describe("WorkspaceAPIKey webhook", func() {
	It("refuses a prefix another workspace key holds", func() {
		ns := newNamespace()
		key := func(name string, i int) *gatewayv1.WorkspaceAPIKey {
			k := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			k.Spec.Type = gatewayv1.KeyTypeManageAll
			k.Spec.Prefix = "mgw_AAAAAAAAAAAA"
			k.Spec.Hash = hash64(i)
			return k
		}
		Expect(k8s.Create(ctx, key("w1", 1))).To(Succeed())
		expectRefused(k8s.Create(ctx, key("w2", 2)), "spec.prefix", "must be unique among the WorkspaceAPIKeys")
	})
})

var _ = Describe("Endpoint webhook", func() {
	It("refuses a slug another Endpoint of the namespace routes", func() {
		ns := newNamespace()
		endpoint := func(name string) *gatewayv1.Endpoint {
			e := &gatewayv1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			e.Spec.Slug = "demo/echo"
			e.Spec.Targets = []gatewayv1.EndpointTarget{{Provider: gatewayv1.ProviderOpenAI, BaseURL: "http://127.0.0.1:9999/v1"}}
			return e
		}
		Expect(k8s.Create(ctx, endpoint("e1"))).To(Succeed())
		expectRefused(k8s.Create(ctx, endpoint("e2")), "spec.slug", "already used by Endpoint e1")

		By("the same slug in another namespace is another workspace")
		other := endpoint("e1")
		other.Namespace = newNamespace()
		Expect(k8s.Create(ctx, other)).To(Succeed())
	})
})

var _ = Describe("Workspace webhook", func() {
	It("refuses a second Workspace in a namespace", func() {
		ns := newNamespace()
		Expect(k8s.Create(ctx, &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}})).To(Succeed())
		err := k8s.Create(ctx, &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}})
		expectRefused(err, "metadata.name", "at most one Workspace per namespace")
	})
})
