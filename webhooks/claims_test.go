package webhooks_test

import (
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// race runs create for each of n writers at once and returns how many succeeded; every refusal must be a
// Duplicate cause on path.
func race(n int, path string, create func(i int) client.Object) int {
	GinkgoHelper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = k8s.Create(ctx, create(i))
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "a loser must be refused as invalid, got %v", err)
		Expect(err.Error()).To(ContainSubstring(path))
		Expect(err.Error()).To(Or(ContainSubstring("Duplicate value"), ContainSubstring("already used")))
	}
	return won
}

var _ = Describe("Uniqueness claims", func() {
	It("admit exactly one of 20 concurrent Groups with one external id, in each of 20 races", func() {
		ns := newNamespace()
		for trial := range 20 {
			won := race(20, "spec.externalEntityID", func(i int) client.Object {
				g := group(ns, fmt.Sprintf("g-%d-%d", trial, i), "", indep)
				g.Spec.ExternalEntityID = fmt.Sprintf("contested-%d", trial)
				return g
			})
			Expect(won).To(Equal(1), "race %d", trial)
		}
	})

	It("admit exactly one of an APIKey and a WorkspaceAPIKey with one prefix, in each of 20 races", func() {
		ns := newNamespace()
		for trial := range 20 {
			prefix := fmt.Sprintf("mgk_Race%08d", trial)
			won := race(2, "spec.prefix", func(i int) client.Object {
				name := fmt.Sprintf("k-%d-%d", trial, i)
				if i == 0 {
					k := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
					k.Spec.GroupID, k.Spec.Prefix, k.Spec.Hash = "acme", prefix, hash64(trial)
					return k
				}
				k := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
				k.Spec.Type, k.Spec.Prefix, k.Spec.Hash = gatewayv1.KeyTypeManageAll, prefix, hash64(1000+trial)
				return k
			})
			Expect(won).To(Equal(1), "race %d", trial)
		}
	})

	It("refuse a key whose prefix a key of the other kind holds, with no race at all", func() {
		ns := newNamespace()
		w := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admin"}}
		w.Spec.Type, w.Spec.Prefix, w.Spec.Hash = gatewayv1.KeyTypeManageAll, "mgw_SharedPrefix", hash64(1)
		Expect(k8s.Create(ctx, w)).To(Succeed())
		k := &gatewayv1.APIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registered"}}
		k.Spec.GroupID, k.Spec.Prefix, k.Spec.Hash = "acme", "mgw_SharedPrefix", hash64(2)
		expectRefused(k8s.Create(ctx, k), "spec.prefix", "WorkspaceAPIKey admin")

		By("and the other way round: a workspace key whose prefix an APIKey holds")
		k.Spec.Prefix = "mgk_SharedPrefix"
		Expect(k8s.Create(ctx, k)).To(Succeed())
		w2 := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "second"}}
		w2.Spec.Type, w2.Spec.Prefix, w2.Spec.Hash = gatewayv1.KeyTypeManageAll, "mgk_SharedPrefix", hash64(3)
		expectRefused(k8s.Create(ctx, w2), "spec.prefix", "APIKey registered")
	})

	It("let a group take an external id its holder gave up or is giving up", func() {
		ns := newNamespace()
		a := withExternalID(ns, "a", "moving")
		Expect(k8s.Create(ctx, a)).To(Succeed())
		expectRefused(k8s.Create(ctx, withExternalID(ns, "b", "moving")), "spec.externalEntityID", "already used by Group a")

		By("the holder moves to another id: the old one is free")
		a.Spec.ExternalEntityID = "moved"
		Expect(k8s.Update(ctx, a)).To(Succeed())
		b := withExternalID(ns, "b", "moving")
		Expect(k8s.Create(ctx, b)).To(Succeed())

		By("the holder is being deleted: its id is free at once")
		b.Finalizers = []string{holdFinalizer}
		Expect(k8s.Update(ctx, b)).To(Succeed())
		Expect(k8s.Delete(ctx, b)).To(Succeed())
		Expect(k8s.Create(ctx, withExternalID(ns, "c", "moving"))).To(Succeed())
		letGo(b)
	})

	It("stamp a claim's time at every take: a create, a take-over, and a key taking its name again", func() {
		ns := newNamespace()
		claimedAt := func(value string) time.Time {
			GinkgoHelper()
			var cm corev1.ConfigMap
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: gatewayv1.ClaimName(gatewayv1.ClaimKindKeyName, value)}, &cm)).To(Succeed())
			t, err := time.Parse(time.RFC3339Nano, cm.Data[gatewayv1.ClaimDataClaimedAt])
			Expect(err).NotTo(HaveOccurred(), "claimedAt %q", cm.Data[gatewayv1.ClaimDataClaimedAt])
			return t
		}
		k := namedKey(ns, "k1", "ci", gatewayv1.KeyTypeManageAPIKeys, "", "")
		Expect(k8s.Create(ctx, k)).To(Succeed())
		created := claimedAt(k.NameClaim())

		By("the key leaves its name and takes it again: the claim it still holds is stamped anew")
		old := k.NameClaim()
		k.Spec.DisplayName = "ci-2"
		Expect(k8s.Update(ctx, k)).To(Succeed())
		k.Spec.DisplayName = "ci"
		Expect(k8s.Update(ctx, k)).To(Succeed())
		again := claimedAt(old)
		Expect(again).To(BeTemporally(">", created))

		By("another key takes over the name a key left")
		k.Spec.DisplayName = "ci-3"
		Expect(k8s.Update(ctx, k)).To(Succeed())
		Expect(k8s.Create(ctx, namedKey(ns, "k2", "ci", gatewayv1.KeyTypeManageAPIKeys, "", ""))).To(Succeed())
		Expect(claimedAt(old)).To(BeTemporally(">", again))
	})

	It("free a deleted group's external id as its last finalizer goes, not only once its claim is old", func() {
		ns := newNamespace()
		a := withExternalID(ns, "a", "reused")
		a.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, a)).To(Succeed())
		Expect(k8s.Delete(ctx, a)).To(Succeed())
		letGo(a)
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(a), a))).To(BeTrue())

		// The claim is seconds old and its holder gone: kept, it would refuse b for the rest of its grace.
		_, err := externalIDClaim(ns, "reused")
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the claim of the deleted group is released")
		Expect(k8s.Create(ctx, withExternalID(ns, "b", "reused"))).To(Succeed())
		claim, err := externalIDClaim(ns, "reused")
		Expect(err).NotTo(HaveOccurred())
		Expect(claim.Data).To(HaveKeyWithValue("holderName", "b"))

		By("a group whose last finalizer goes leaves alone the claim another group took from it")
		c := withExternalID(ns, "c", "shared")
		c.Finalizers = []string{holdFinalizer}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		Expect(k8s.Delete(ctx, c)).To(Succeed())
		Expect(k8s.Create(ctx, withExternalID(ns, "d", "shared"))).To(Succeed())
		letGo(c)
		claim, err = externalIDClaim(ns, "shared")
		Expect(err).NotTo(HaveOccurred())
		Expect(claim.Data).To(HaveKeyWithValue("holderName", "d"))
		expectRefused(k8s.Create(ctx, withExternalID(ns, "e", "shared")), "spec.externalEntityID", "already used by Group d")
	})
})

// withExternalID is an INDEPENDENT root group with the external id id.
func withExternalID(ns, name, id string) *gatewayv1.Group {
	g := group(ns, name, "", indep)
	g.Spec.ExternalEntityID = id
	return g
}

// externalIDClaim reads the claim ConfigMap of the external id id.
func externalIDClaim(ns, id string) (*corev1.ConfigMap, error) {
	claim := &corev1.ConfigMap{}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: gatewayv1.ClaimName("external-id", id)}, claim)
	return claim, err
}
