package workspacekeys_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
	"github.com/modelgate/modelgate/test/kubetest"
)

// Team keys are bound to their Team's uid (docs/security.md "Team keys are bound to their Team"): through the real
// webhooks, materializer and snapshot, a deleted Team's key stops authenticating, and a new Team of the same name
// does not bring it back.
var _ = Describe("Team keys bound to their Team", func() {
	It("stop authenticating when their Team is deleted, and do not attach to a new Team of the same name", func() {
		ns, err := kubetest.NewNamespace(resttest.Ctx, resttest.Client, "teamuid-")
		Expect(err).NotTo(HaveOccurred())
		resttest.Dir.Add(ns)
		newTeam := func() *gatewayv1.Team {
			GinkgoHelper()
			t := &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Name: "ml", Namespace: ns}, Spec: gatewayv1.TeamSpec{DisplayName: "ML"}}
			Expect(resttest.Client.Create(resttest.Ctx, t)).To(Succeed())
			return t
		}
		hasTeam := func(uidOf *gatewayv1.Team) func(g Gomega) {
			return func(g Gomega) {
				s, err := resttest.ReadSnapshot(resttest.Ctx, resttest.Client, ns)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(slices.ContainsFunc(s.Teams, func(t snapshot.Team) bool { return t.ID == "ml" })).To(Equal(uidOf != nil))
			}
		}
		first := newTeam()

		plain := "mgw_teamuid0000.S3cr3tS3cr3tS3cr3tS3cr3tS3cr3tAb"
		sum := sha256.Sum256([]byte(plain))
		key := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Name: "ml-invoke", Namespace: ns},
			Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAll, TeamID: "ml",
				KeySource: gatewayv1.KeySource{Prefix: plain[:16], Hash: hex.EncodeToString(sum[:])}}}
		Expect(resttest.Client.Create(resttest.Ctx, key)).To(Succeed())
		Expect(key.Annotations).To(HaveKeyWithValue(gatewayv1.AnnotationTeamUID, string(first.UID)), "admission binds the key to its Team")
		Eventually(func() bool { _, ok := resttest.Dir.Lookup(plain); return ok }).WithTimeout(30 * time.Second).Should(BeTrue())
		Expect(resttest.Call(resttest.Server, plain, http.MethodGet, "/v1/teams", nil).Code).To(Equal(http.StatusOK))

		By("an update cannot move the binding")
		forge := fmt.Sprintf(`{"metadata":{"annotations":{%q:"forged"}}}`, gatewayv1.AnnotationTeamUID)
		Expect(resttest.Client.Patch(resttest.Ctx, key, client.RawPatch(types.MergePatchType, []byte(forge)))).To(Succeed())
		Expect(key.Annotations).To(HaveKeyWithValue(gatewayv1.AnnotationTeamUID, string(first.UID)))

		By("deleting the Team ends the key's access")
		Expect(resttest.Client.Delete(resttest.Ctx, first)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(resttest.Client.Get(resttest.Ctx, client.ObjectKeyFromObject(first), &gatewayv1.Team{}))
		}).
			WithTimeout(30 * time.Second).Should(BeTrue())
		Eventually(hasTeam(nil)).WithTimeout(30 * time.Second).Should(Succeed())
		_, ok := resttest.Dir.Lookup(plain)
		Expect(ok).To(BeFalse(), "the snapshot without the Team does not carry its key")
		Expect(resttest.Call(resttest.Server, plain, http.MethodGet, "/v1/teams", nil).Code).To(Equal(http.StatusUnauthorized))

		By("a new Team of the same name does not bring the key back")
		second := newTeam()
		Expect(second.UID).NotTo(Equal(first.UID))
		Eventually(hasTeam(second)).WithTimeout(30 * time.Second).Should(Succeed())
		_, ok = resttest.Dir.Lookup(plain)
		Expect(ok).To(BeFalse(), "the snapshot with the new Team does not carry the old Team's key")
		Expect(resttest.Call(resttest.Server, plain, http.MethodGet, "/v1/teams", nil).Code).To(Equal(http.StatusUnauthorized))

		By("a key created for the new Team is served")
		fresh := "mgw_teamuid0001.S3cr3tS3cr3tS3cr3tS3cr3tS3cr3tAb"
		sum = sha256.Sum256([]byte(fresh))
		Expect(resttest.Client.Create(resttest.Ctx, &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Name: "ml-invoke-2", Namespace: ns},
			Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAll, TeamID: "ml",
				KeySource: gatewayv1.KeySource{Prefix: fresh[:16], Hash: hex.EncodeToString(sum[:])}}})).To(Succeed())
		Eventually(func() bool { _, ok := resttest.Dir.Lookup(fresh); return ok }).WithTimeout(30 * time.Second).Should(BeTrue())

		By("the key list shows the new Team's key, and not the revoked one under the new Team's name")
		manager := resttest.SeedKey(ns, gatewayv1.KeyTypeManageAPIKeys, "", "")
		listed := func(g Gomega) []string {
			r := resttest.Call(resttest.Server, manager, http.MethodGet, "/v1/api_keys", nil)
			g.Expect(r.Code).To(Equal(http.StatusOK))
			var prefixes []string
			for _, k := range r.Body["keys"].([]any) {
				prefixes = append(prefixes, k.(map[string]any)["prefix"].(string))
			}
			return prefixes
		}
		Eventually(listed).WithTimeout(30 * time.Second).Should(ContainElement(fresh[:16]))
		Expect(listed(Default)).NotTo(ContainElement(plain[:16]), "a deleted Team's key is revoked, not the new Team's")
	})
})
