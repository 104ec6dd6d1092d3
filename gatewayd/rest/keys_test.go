package rest_test

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
	"github.com/modelgate/modelgate/test/apibody"
)

var _ = Describe("Federated keys", Ordered, func() {
	var ns, admin, groupID, keysPath string
	var minted map[string]any

	BeforeAll(func() {
		ns, admin = workspace(gatewayv1.KeyTypeManageAll, "")
		r := call(server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("cust-keys", "", nil, apibody.Model("demo/echo", nil, nil)))
		Expect(r.code).To(Equal(http.StatusCreated), "%s", r)
		groupID = r.body["id"].(string)
		keysPath = "/v1/gateway/groups/" + groupID + "/api_keys"
	})

	snapshotHasKey := func(prefix string) bool {
		return slices.ContainsFunc(mustSnapshot(ns).APIKeys, func(k snapshot.APIKey) bool { return k.Prefix == prefix })
	}

	It("mints a key once, storing only its prefix and hash, and enforces it before answering", func() {
		r := call(server, admin, http.MethodPost, keysPath, map[string]any{"name": "prod"})
		Expect(r.code).To(Equal(http.StatusCreated), "%s", r)
		conform("MintedKey", r.raw)
		minted = r.body
		key := minted["api_key"].(string)
		Expect(key).To(MatchRegexp(`^mgk_[0-9A-Za-z]{12}\.[0-9A-Za-z]{32}$`))
		Expect(minted["prefix"]).To(Equal(key[:16]))
		Expect(minted["name"]).To(Equal("prod"))
		Expect(snapshotHasKey(key[:16])).To(BeTrue())

		var keys gatewayv1.APIKeyList
		Expect(k8s.List(ctx, &keys, client.InNamespace(ns))).To(Succeed())
		Expect(keys.Items).To(HaveLen(1))
		sum := sha256.Sum256([]byte(key))
		Expect(keys.Items[0].Spec.Hash).To(Equal(hex.EncodeToString(sum[:])))
		Expect(keys.Items[0].Spec.SecretRef).To(BeNil())
		raw, err := json.Marshal(keys.Items[0])
		Expect(err).NotTo(HaveOccurred())
		Expect(string(raw)).NotTo(ContainSubstring(key[17:]), "the secret part is stored nowhere in the object")

		var secrets corev1.SecretList
		Expect(k8s.List(ctx, &secrets, client.InNamespace(ns))).To(Succeed())
		Expect(secrets.Items).To(BeEmpty())

		expectError(call(server, admin, http.MethodPost, "/v1/gateway/groups/grp-missing0000000/api_keys", nil), http.StatusNotFound, "not_found")
	})

	It("lists, gets and revokes by prefix", func() {
		prefix := minted["prefix"].(string)
		r := call(server, admin, http.MethodPost, keysPath, nil)
		Expect(r.code).To(Equal(http.StatusCreated), "a mint without a body is allowed: %s", r)
		second := r.body["prefix"].(string)

		r = call(server, admin, http.MethodGet, keysPath+"?limit=1", nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		conform("KeyPage", r.raw)
		Expect(r.body["items"]).To(HaveLen(1))
		Expect(r.body["pagination"].(map[string]any)["has_more"]).To(BeTrue())
		r2 := call(server, admin, http.MethodGet, keysPath+"?limit=1&cursor="+r.body["pagination"].(map[string]any)["cursor"].(string), nil)
		Expect(r2.body["pagination"]).To(Equal(map[string]any{"has_more": false, "cursor": nil}))
		got := []string{r.body["items"].([]any)[0].(map[string]any)["prefix"].(string), r2.body["items"].([]any)[0].(map[string]any)["prefix"].(string)}
		Expect(got).To(ConsistOf(prefix, second))
		Expect(string(r.raw) + string(r2.raw)).NotTo(ContainSubstring(minted["api_key"].(string)))

		r = call(server, admin, http.MethodGet, keysPath+"/"+prefix, nil)
		Expect(r.code).To(Equal(http.StatusOK))
		Expect(r.body).To(Equal(map[string]any{"prefix": prefix, "name": "prod"}))
		expectError(call(server, admin, http.MethodGet, keysPath+"/mgk_000000000000", nil), http.StatusNotFound, "not_found")
		expectError(call(server, admin, http.MethodGet, keysPath+"/short", nil), http.StatusBadRequest, "invalid_request")

		r = call(server, admin, http.MethodDelete, keysPath+"/"+prefix, nil)
		Expect(r.code).To(Equal(http.StatusOK), "%s", r)
		Expect(r.body).To(Equal(map[string]any{"prefix": prefix}))
		Expect(snapshotHasKey(prefix)).To(BeFalse(), "revocation is enforced before the answer")
		Expect(snapshotHasKey(second)).To(BeTrue(), "other keys of the group are unaffected")
		expectError(call(server, admin, http.MethodGet, keysPath+"/"+prefix, nil), http.StatusNotFound, "not_found")
	})

	Describe("registration", Ordered, func() {
		var priv ed25519.PrivateKey
		register := func(body any, sign bool) response {
			raw, err := json.Marshal(body)
			Expect(err).NotTo(HaveOccurred())
			sig := base64.StdEncoding.EncodeToString(ed25519.Sign(priv, raw))
			if !sign {
				sig = base64.StdEncoding.EncodeToString(ed25519.Sign(priv, append(raw, ' ')))
			}
			return call(server, admin, http.MethodPost, keysPath+"/register", raw, "X-Service-Signature", sig)
		}
		const good = "regKey_7f3Q9zLmP2xW8vB4nK6tR1yH5jD0cA"

		It("refuses every call until the workspace has a public key", func() {
			var err error
			_, priv, err = ed25519.GenerateKey(rand.Reader)
			Expect(err).NotTo(HaveOccurred())
			r := register(map[string]any{"name": "r", "key": good}, true)
			expectError(r, http.StatusBadRequest, "public_key_not_registered")
			expectError(call(server, admin, http.MethodPost, keysPath+"/register", "{}"), http.StatusBadRequest, "public_key_not_registered")

			ws := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
			ws.Spec.KeyRegistration = &gatewayv1.KeyRegistration{PublicKey: base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))}
			Expect(k8s.Create(ctx, ws)).To(Succeed())
		})

		It("registers a key with a good signature, never echoing it", func() {
			r := register(map[string]any{"name": "registered", "key": good}, true)
			Expect(r.code).To(Equal(http.StatusOK), "%s", r)
			Expect(r.body).To(Equal(map[string]any{"ok": true}))
			conform("Ok", r.raw)
			Expect(string(r.raw)).NotTo(ContainSubstring(good))
			Expect(snapshotHasKey(good[:16])).To(BeTrue())
			r = call(server, admin, http.MethodGet, keysPath+"/"+good[:16], nil)
			Expect(r.body).To(Equal(map[string]any{"prefix": good[:16], "name": "registered"}))
		})

		It("checks the signature first, then length, entropy and prefix uniqueness", func() {
			expectError(register(map[string]any{"key": "short"}, false), http.StatusBadRequest, "invalid_signature")
			expectError(call(server, admin, http.MethodPost, keysPath+"/register", `{"key":"`+good+`"}`), http.StatusBadRequest, "invalid_signature")
			expectError(call(server, admin, http.MethodPost, keysPath+"/register", `{"key":"`+good+`"}`, "X-Service-Signature", "%%%"),
				http.StatusBadRequest, "invalid_signature")

			r := register(map[string]any{"key": "aB3dE5gH9jK1mN2pQ4rS6tU8vW0xY7z"}, true) // 31 characters
			expectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.body["error"]).To(ContainSubstring("32 to 128"))
			r = register(map[string]any{"key": strings.Repeat("aB3dE5gH9jK1mN2pQ4rS6tU8vW0xY7zC", 4) + "X"}, true) // 129
			expectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.body["error"]).To(ContainSubstring("32 to 128"))
			r = register(map[string]any{"key": strings.Repeat("ab", 20)}, true)
			expectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.body["error"]).To(ContainSubstring("entropy"))

			r = register(map[string]any{"key": good[:16] + "ZZ_differentSecret_9876543210"}, true)
			expectError(r, http.StatusConflict, "conflict")
			Expect(string(r.raw)).NotTo(ContainSubstring("differentSecret"))
		})

		It("accepts exactly 32 and 128 characters", func() {
			k32 := "b4Xq-Lm9Zt2Wn7Rp5Vk8Hs3Jd6Gf1Cy0"
			Expect(k32).To(HaveLen(32))
			Expect(register(map[string]any{"key": k32}, true).code).To(Equal(http.StatusOK))
			k128 := "c5Yr" + strings.Repeat("Mn0Zu3Xo8Sl1Ke6Id9Hb2Fa7Gc4Je5Wq", 4)[:124]
			Expect(k128).To(HaveLen(128))
			Expect(register(map[string]any{"key": k128}, true).code).To(Equal(http.StatusOK))
		})
	})
})
