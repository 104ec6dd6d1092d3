package apikeys_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
	"github.com/modelgate/modelgate/test/apibody"
)

var _ = Describe("Federated keys", Ordered, func() {
	var ns, admin, groupID, keysPath string
	var minted map[string]any

	BeforeAll(func() {
		ns, admin = resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-keys", "", nil, apibody.Model("demo/echo", nil, nil)))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		groupID = r.Body["id"].(string)
		keysPath = "/v1/gateway/groups/" + groupID + "/api_keys"
	})

	snapshotHasKey := func(prefix string) bool {
		return slices.ContainsFunc(resttest.MustSnapshot(ns).APIKeys, func(k snapshot.APIKey) bool { return k.Prefix == prefix })
	}

	It("mints a key once, storing only its prefix and hash, and enforces it before answering", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, keysPath, map[string]any{"name": "prod"})
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.Conform("MintedKey", r.Raw)
		minted = r.Body
		key := minted["api_key"].(string)
		Expect(key).To(MatchRegexp(`^mgk_[0-9A-Za-z]{12}\.[0-9A-Za-z]{32}$`))
		Expect(minted["prefix"]).To(Equal(key[:16]))
		Expect(minted["name"]).To(Equal("prod"))
		Expect(snapshotHasKey(key[:16])).To(BeTrue())

		var keys gatewayv1.APIKeyList
		Expect(resttest.Client.List(resttest.Ctx, &keys, client.InNamespace(ns))).To(Succeed())
		Expect(keys.Items).To(HaveLen(1))
		sum := sha256.Sum256([]byte(key))
		Expect(keys.Items[0].Spec.Hash).To(Equal(hex.EncodeToString(sum[:])))
		Expect(keys.Items[0].Spec.SecretRef).To(BeNil())
		raw, err := json.Marshal(keys.Items[0])
		Expect(err).NotTo(HaveOccurred())
		Expect(string(raw)).NotTo(ContainSubstring(key[17:]), "the secret part is stored nowhere in the object")

		var secrets corev1.SecretList
		Expect(resttest.Client.List(resttest.Ctx, &secrets, client.InNamespace(ns))).To(Succeed())
		Expect(secrets.Items).To(BeEmpty())

		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups/grp-missing0000000/api_keys", nil), http.StatusNotFound, "not_found")
	})

	It("lists, gets and revokes by prefix", func() {
		prefix := minted["prefix"].(string)
		r := resttest.Call(resttest.Server, admin, http.MethodPost, keysPath, nil)
		Expect(r.Code).To(Equal(http.StatusCreated), "a mint without a body is allowed: %s", r)
		second := r.Body["prefix"].(string)

		r = resttest.Call(resttest.Server, admin, http.MethodGet, keysPath+"?limit=1", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("KeyPage", r.Raw)
		Expect(r.Body["items"]).To(HaveLen(1))
		Expect(r.Body["pagination"].(map[string]any)["has_more"]).To(BeTrue())
		r2 := resttest.Call(resttest.Server, admin, http.MethodGet, keysPath+"?limit=1&cursor="+r.Body["pagination"].(map[string]any)["cursor"].(string), nil)
		Expect(r2.Body["pagination"]).To(Equal(map[string]any{"has_more": false, "cursor": nil}))
		got := []string{r.Body["items"].([]any)[0].(map[string]any)["prefix"].(string), r2.Body["items"].([]any)[0].(map[string]any)["prefix"].(string)}
		Expect(got).To(ConsistOf(prefix, second))
		Expect(string(r.Raw) + string(r2.Raw)).NotTo(ContainSubstring(minted["api_key"].(string)))

		r = resttest.Call(resttest.Server, admin, http.MethodGet, keysPath+"/"+prefix, nil)
		Expect(r.Code).To(Equal(http.StatusOK))
		Expect(r.Body).To(Equal(map[string]any{"prefix": prefix, "name": "prod"}))
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodGet, keysPath+"/mgk_000000000000", nil), http.StatusNotFound, "not_found")
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodGet, keysPath+"/short", nil), http.StatusBadRequest, "invalid_request")

		r = resttest.Call(resttest.Server, admin, http.MethodDelete, keysPath+"/"+prefix, nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.Body).To(Equal(map[string]any{"prefix": prefix}))
		Expect(snapshotHasKey(prefix)).To(BeFalse(), "revocation is enforced before the answer")
		Expect(snapshotHasKey(second)).To(BeTrue(), "other keys of the group are unaffected")
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodGet, keysPath+"/"+prefix, nil), http.StatusNotFound, "not_found")
	})

	Describe("registration", Ordered, func() {
		var priv ed25519.PrivateKey
		register := func(body any, sign bool) resttest.Response {
			raw, err := json.Marshal(body)
			Expect(err).NotTo(HaveOccurred())
			sig := base64.StdEncoding.EncodeToString(ed25519.Sign(priv, raw))
			if !sign {
				sig = base64.StdEncoding.EncodeToString(ed25519.Sign(priv, append(raw, ' ')))
			}
			return resttest.Call(resttest.Server, admin, http.MethodPost, keysPath+"/register", raw, "X-Service-Signature", sig)
		}
		const good = "regKey_7f3Q9zLmP2xW8vB4nK6tR1yH5jD0cA"

		It("refuses every call until the workspace has a public key", func() {
			var err error
			_, priv, err = ed25519.GenerateKey(rand.Reader)
			Expect(err).NotTo(HaveOccurred())
			r := register(map[string]any{"name": "r", "key": good}, true)
			resttest.ExpectError(r, http.StatusBadRequest, "public_key_not_registered")
			resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPost, keysPath+"/register", "{}"), http.StatusBadRequest, "public_key_not_registered")

			ws := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
			ws.Spec.KeyRegistration = &gatewayv1.KeyRegistration{PublicKey: base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))}
			Expect(resttest.Client.Create(resttest.Ctx, ws)).To(Succeed())
		})

		It("registers a key with a good signature, never echoing it", func() {
			r := register(map[string]any{"name": "registered", "key": good}, true)
			Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
			Expect(r.Body).To(Equal(map[string]any{"ok": true}))
			resttest.Conform("Ok", r.Raw)
			Expect(string(r.Raw)).NotTo(ContainSubstring(good))
			Expect(snapshotHasKey(good[:16])).To(BeTrue())
			r = resttest.Call(resttest.Server, admin, http.MethodGet, keysPath+"/"+good[:16], nil)
			Expect(r.Body).To(Equal(map[string]any{"prefix": good[:16], "name": "registered"}))
		})

		It("checks the signature first, then length, entropy and prefix uniqueness", func() {
			resttest.ExpectError(register(map[string]any{"key": "short"}, false), http.StatusBadRequest, "invalid_signature")
			resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPost, keysPath+"/register", `{"key":"`+good+`"}`), http.StatusBadRequest, "invalid_signature")
			resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPost, keysPath+"/register", `{"key":"`+good+`"}`, "X-Service-Signature", "%%%"),
				http.StatusBadRequest, "invalid_signature")

			r := register(map[string]any{"key": "aB3dE5gH9jK1mN2pQ4rS6tU8vW0xY7z"}, true) // 31 characters
			resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.Body["error"]).To(ContainSubstring("32 to 128"))
			r = register(map[string]any{"key": strings.Repeat("aB3dE5gH9jK1mN2pQ4rS6tU8vW0xY7zC", 4) + "X"}, true) // 129
			resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.Body["error"]).To(ContainSubstring("32 to 128"))
			r = register(map[string]any{"key": strings.Repeat("ab", 20)}, true)
			resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.Body["error"]).To(ContainSubstring("entropy"))

			r = register(map[string]any{"key": good[:16] + "ZZ_differentSecret_9876543210"}, true)
			resttest.ExpectError(r, http.StatusConflict, "conflict")
			Expect(string(r.Raw)).NotTo(ContainSubstring("differentSecret"))
		})

		It("accepts exactly 32 and 128 characters", func() {
			k32 := "b4Xq-Lm9Zt2Wn7Rp5Vk8Hs3Jd6Gf1Cy0"
			Expect(k32).To(HaveLen(32))
			Expect(register(map[string]any{"key": k32}, true).Code).To(Equal(http.StatusOK))
			k128 := "c5Yr" + strings.Repeat("Mn0Zu3Xo8Sl1Ke6Id9Hb2Fa7Gc4Je5Wq", 4)[:124]
			Expect(k128).To(HaveLen(128))
			Expect(register(map[string]any{"key": k128}, true).Code).To(Equal(http.StatusOK))
		})
	})
})
