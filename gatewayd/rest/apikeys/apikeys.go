package apikeys

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/apikey"
	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// api serves the routes of this package.
type api struct{ *kit.Kit }

// Register adds the routes of this package to mux.
func Register(mux ingress.Mux, k *kit.Kit) {
	a := &api{k}
	k.Handle(mux, "POST /v1/gateway/groups/{group_id}/api_keys", kit.AccessGateway, a.mintKey)
	k.Handle(mux, "POST /v1/gateway/groups/{group_id}/api_keys/register", kit.AccessGateway, a.registerKey)
	k.Handle(mux, "GET /v1/gateway/groups/{group_id}/api_keys", kit.AccessGateway, a.listKeys)
	k.Handle(mux, "GET /v1/gateway/groups/{group_id}/api_keys/{api_key_prefix}", kit.AccessGateway, a.getKey)
	k.Handle(mux, "DELETE /v1/gateway/groups/{group_id}/api_keys/{api_key_prefix}", kit.AccessGateway, a.deleteKey)
}

type keyJSON struct {
	Prefix string `json:"prefix"`
	Name   string `json:"name"`
}

type mintKeyRequest struct {
	Name string `json:"name"`
}

type registerKeyRequest struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// mintKey creates a federated key: the plaintext is in this response only, the APIKey holds prefix and hash.
func (a *api) mintKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req mintKeyRequest
	if !kit.DecodeBody(w, r, &req, true) {
		return
	}
	g, ok := a.LoadGroup(w, r, c)
	if !ok {
		return
	}
	plain, err := apikey.Mint(apikey.Federated)
	if err != nil {
		httperr.Write(w, http.StatusInternalServerError, httperr.CodeInternal, "Failed to mint a key.", nil)
		return
	}
	if !a.createAPIKey(w, r, c, g.Name, req.Name, plain) {
		return
	}
	httperr.WriteJSON(w, http.StatusCreated, map[string]string{"api_key": plain, "prefix": apikey.Prefix(plain), "name": req.Name})
}

// registerKey stores a caller-supplied key, checked in the order of docs/rest-api.md "Federated keys": the
// workspace's public key and the body's signature, length, entropy, then prefix uniqueness. The key is never
// echoed or logged.
func (a *api) registerKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	raw, ok := kit.ReadBody(w, r)
	if !ok {
		return
	}
	pub, err := a.workspacePublicKey(r.Context(), c.Namespace)
	if err != nil {
		kit.WriteKubeError(w, r, "get workspace", err)
		return
	}
	if pub == nil {
		httperr.Write(w, http.StatusBadRequest, "public_key_not_registered",
			"The workspace has no public key for key registration: set spec.keyRegistration.publicKey on its Workspace first.", nil)
		return
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(r.Header.Get("X-Service-Signature")))
	if err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, raw, sig) {
		httperr.Write(w, http.StatusBadRequest, "invalid_signature",
			"X-Service-Signature must be the base64 Ed25519 signature of the exact request body by the workspace's private key.",
			[]httperr.FieldError{{Field: "X-Service-Signature", Message: "signature does not verify"}})
		return
	}
	var req registerKeyRequest
	if !kit.DecodeBytes(w, raw, &req, false) {
		return
	}
	g, ok := a.LoadGroup(w, r, c)
	if !ok {
		return
	}
	n := utf8.RuneCountInString(req.Key)
	switch {
	case n < apikey.MinRegisteredLen || n > apikey.MaxRegisteredLen:
		kit.BadRequest(w, "key", fmt.Sprintf("key must be %d to %d characters long; it has %d.", apikey.MinRegisteredLen, apikey.MaxRegisteredLen, n))
		return
	case apikey.Entropy(req.Key) < apikey.MinEntropy:
		kit.BadRequest(w, "key", fmt.Sprintf("key must have at least %.1f bits of Shannon entropy per character; it has %.2f.",
			apikey.MinEntropy, apikey.Entropy(req.Key)))
		return
	case !kit.ValidPrefix(req.Key[:apikey.PrefixLen]):
		kit.BadRequest(w, "key", "The first 16 characters of key (its prefix) must be printable ASCII without spaces.")
		return
	}
	prefix := req.Key[:apikey.PrefixLen]
	existing, err := a.findAPIKey(r.Context(), c.Namespace, prefix)
	if err != nil {
		kit.WriteKubeError(w, r, "list api keys", err)
		return
	}
	if existing != nil {
		httperr.Write(w, http.StatusConflict, httperr.CodeConflict,
			fmt.Sprintf("prefix: the key's prefix %q is already used in this workspace; prefixes must be unique.", prefix),
			[]httperr.FieldError{{Field: "key", Message: "prefix (first 16 characters) already in use"}})
		return
	}
	if !a.createAPIKey(w, r, c, g.Name, req.Name, req.Key) {
		return
	}
	httperr.WriteOK(w)
}

func (a *api) createAPIKey(w http.ResponseWriter, r *http.Request, c auth.Caller, groupID, name, plain string) bool {
	if len(name) > 256 {
		kit.BadRequest(w, "name", "name must be at most 256 characters.")
		return false
	}
	prefix := apikey.Prefix(plain)
	k := &gatewayv1.APIKey{
		ObjectMeta: metav1.ObjectMeta{Name: ids.New(ids.FederatedKeyName), Namespace: c.Namespace},
		Spec: gatewayv1.APIKeySpec{
			GroupID:     groupID,
			DisplayName: name,
			KeySource:   gatewayv1.KeySource{Prefix: prefix, Hash: apikey.Hash(plain)},
		},
	}
	if err := a.Opts.Client.Create(r.Context(), k); err != nil {
		kit.WriteKubeError(w, r, "create api key", err)
		return false
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "api key "+prefix, func(*snapshot.Snapshot) bool {
		return a.Opts.Directory.HasAPIKey(c.Namespace, prefix)
	})
	return true
}

func (a *api) listKeys(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	p, ok := kit.ParsePage(w, r)
	if !ok {
		return
	}
	g, ok := a.LoadGroup(w, r, c)
	if !ok {
		return
	}
	keys, err := a.groupKeys(r.Context(), c.Namespace, g.Name)
	if err != nil {
		kit.WriteKubeError(w, r, "list api keys", err)
		return
	}
	prefixes := make([]string, len(keys))
	for i, k := range keys {
		prefixes[i] = keyPrefix(k)
	}
	sel, more := p.Slice(prefixes)
	items := make([]keyJSON, 0, len(sel))
	for _, i := range sel {
		items = append(items, keyJSON{Prefix: prefixes[i], Name: keys[i].Spec.DisplayName})
	}
	httperr.WriteJSON(w, http.StatusOK, kit.NewPage(items, more, prefixes, sel))
}

func (a *api) getKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	k, ok := a.loadKey(w, r, c)
	if !ok {
		return
	}
	httperr.WriteJSON(w, http.StatusOK, keyJSON{Prefix: keyPrefix(k), Name: k.Spec.DisplayName})
}

// deleteKey revokes a federated key; it stops authenticating as soon as the local snapshot drops it.
func (a *api) deleteKey(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	k, ok := a.loadKey(w, r, c)
	if !ok {
		return
	}
	prefix := keyPrefix(k)
	if err := a.Opts.Client.Delete(r.Context(), k, client.Preconditions{UID: &k.UID}); err != nil && !apierrors.IsNotFound(err) {
		kit.WriteKubeError(w, r, "delete api key", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "revoke api key "+prefix, func(*snapshot.Snapshot) bool {
		return !a.Opts.Directory.HasAPIKey(c.Namespace, prefix)
	})
	httperr.WriteJSON(w, http.StatusOK, map[string]string{"prefix": prefix})
}

func (a *api) loadKey(w http.ResponseWriter, r *http.Request, c auth.Caller) (*gatewayv1.APIKey, bool) {
	prefix := r.PathValue("api_key_prefix")
	if !kit.ValidPrefix(prefix) {
		kit.BadRequest(w, "api_key_prefix", fmt.Sprintf("%q is not a key prefix: a prefix is 16 printable characters.", prefix))
		return nil, false
	}
	g, ok := a.LoadGroup(w, r, c)
	if !ok {
		return nil, false
	}
	k, err := a.findAPIKey(r.Context(), c.Namespace, prefix)
	if err != nil {
		kit.WriteKubeError(w, r, "list api keys", err)
		return nil, false
	}
	if k == nil || k.Spec.GroupID != g.Name {
		kit.NotFound(w, "API key", prefix)
		return nil, false
	}
	return k, true
}

// groupKeys lists the live keys of a group that have a prefix, sorted by prefix.
func (a *api) groupKeys(ctx context.Context, ns, groupID string) ([]*gatewayv1.APIKey, error) {
	var list gatewayv1.APIKeyList
	if err := a.Opts.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{gatewayv1.FieldAPIKeyGroup: groupID}); err != nil {
		return nil, err
	}
	var out []*gatewayv1.APIKey
	for i := range list.Items {
		k := &list.Items[i]
		if k.DeletionTimestamp == nil && k.Spec.GroupID == groupID && keyPrefix(k) != "" {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b *gatewayv1.APIKey) int { return strings.Compare(keyPrefix(a), keyPrefix(b)) })
	return out, nil
}

// findAPIKey returns the live key of the namespace with the prefix, or nil. A key's prefix is in its spec when
// it was registered by hash and in its status otherwise, so both field selectors are asked.
func (a *api) findAPIKey(ctx context.Context, ns, prefix string) (*gatewayv1.APIKey, error) {
	for _, f := range []string{gatewayv1.FieldSpecPrefix, gatewayv1.FieldStatusPrefix} {
		var list gatewayv1.APIKeyList
		if err := a.Opts.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{f: prefix}); err != nil {
			return nil, err
		}
		for i := range list.Items {
			if k := &list.Items[i]; k.DeletionTimestamp == nil {
				return k, nil
			}
		}
	}
	return nil, nil
}

// keyPrefix is the prefix of a key from whichever source it has.
func keyPrefix(k *gatewayv1.APIKey) string {
	if k.Spec.Prefix != "" {
		return k.Spec.Prefix
	}
	return k.Status.Prefix
}

// workspacePublicKey returns the namespace's Ed25519 registration key, or nil when none is set (or it is not a
// valid key, which the CRD pattern should prevent).
func (a *api) workspacePublicKey(ctx context.Context, ns string) (ed25519.PublicKey, error) {
	var list gatewayv1.WorkspaceList
	if err := a.Opts.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for _, ws := range list.Items {
		if ws.DeletionTimestamp != nil || ws.Spec.KeyRegistration == nil {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(ws.Spec.KeyRegistration.PublicKey)
		if err == nil && len(raw) == ed25519.PublicKeySize {
			return ed25519.PublicKey(raw), nil
		}
	}
	return nil, nil
}
