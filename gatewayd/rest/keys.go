package rest

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
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

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
func (a *API) mintKey(w http.ResponseWriter, r *http.Request, c caller) {
	var req mintKeyRequest
	if !decodeBody(w, r, &req, true) {
		return
	}
	g, ok := a.loadGroup(w, r, c)
	if !ok {
		return
	}
	plain, err := apikey.Mint(apikey.Federated)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", "Failed to mint a key.", nil)
		return
	}
	if !a.createAPIKey(w, r, c, g.Name, req.Name, plain) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"api_key": plain, "prefix": apikey.Prefix(plain), "name": req.Name})
}

// registerKey stores a caller-supplied key, checked in the order of SPEC.md: the workspace's public key and the
// body's signature, length, entropy, then prefix uniqueness. The key is never echoed or logged.
func (a *API) registerKey(w http.ResponseWriter, r *http.Request, c caller) {
	raw, ok := readBody(w, r)
	if !ok {
		return
	}
	pub, err := a.workspacePublicKey(r.Context(), c.namespace)
	if err != nil {
		writeKubeError(w, r, "get workspace", err)
		return
	}
	if pub == nil {
		writeError(w, http.StatusBadRequest, "public_key_not_registered",
			"The workspace has no public key for key registration: set spec.keyRegistration.publicKey on its Workspace first.", nil)
		return
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(r.Header.Get("X-Service-Signature")))
	if err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, raw, sig) {
		writeError(w, http.StatusBadRequest, "invalid_signature",
			"X-Service-Signature must be the base64 Ed25519 signature of the exact request body by the workspace's private key.",
			[]fieldError{{Field: "X-Service-Signature", Message: "signature does not verify"}})
		return
	}
	var req registerKeyRequest
	if !decodeBytes(w, raw, &req, false) {
		return
	}
	g, ok := a.loadGroup(w, r, c)
	if !ok {
		return
	}
	n := utf8.RuneCountInString(req.Key)
	switch {
	case n < apikey.MinRegisteredLen || n > apikey.MaxRegisteredLen:
		badRequest(w, "key", fmt.Sprintf("key must be %d to %d characters long; it has %d.", apikey.MinRegisteredLen, apikey.MaxRegisteredLen, n))
		return
	case apikey.Entropy(req.Key) < apikey.MinEntropy:
		badRequest(w, "key", fmt.Sprintf("key must have at least %.1f bits of Shannon entropy per character; it has %.2f.",
			apikey.MinEntropy, apikey.Entropy(req.Key)))
		return
	case !validPrefix(req.Key[:apikey.PrefixLen]):
		badRequest(w, "key", "The first 16 characters of key (its prefix) must be printable ASCII without spaces.")
		return
	}
	prefix := req.Key[:apikey.PrefixLen]
	existing, err := a.findAPIKey(r.Context(), c.namespace, prefix)
	if err != nil {
		writeKubeError(w, r, "list api keys", err)
		return
	}
	if existing != nil {
		writeError(w, http.StatusConflict, "conflict",
			fmt.Sprintf("prefix: the key's prefix %q is already used in this workspace; prefixes must be unique.", prefix),
			[]fieldError{{Field: "key", Message: "prefix (first 16 characters) already in use"}})
		return
	}
	if !a.createAPIKey(w, r, c, g.Name, req.Name, req.Key) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (a *API) createAPIKey(w http.ResponseWriter, r *http.Request, c caller, groupID, name, plain string) bool {
	if len(name) > 256 {
		badRequest(w, "name", "name must be at most 256 characters.")
		return false
	}
	prefix := apikey.Prefix(plain)
	k := &gatewayv1.APIKey{
		ObjectMeta: metav1.ObjectMeta{Name: newID("key-"), Namespace: c.namespace},
		Spec: gatewayv1.APIKeySpec{
			GroupID:     groupID,
			DisplayName: name,
			KeySource:   gatewayv1.KeySource{Prefix: prefix, Hash: apikey.Hash(plain)},
		},
	}
	if err := a.opts.Client.Create(r.Context(), k); err != nil {
		writeKubeError(w, r, "create api key", err)
		return false
	}
	a.awaitSnapshot(r.Context(), c.namespace, "api key "+prefix, func(s *snapshot.Snapshot) bool {
		return slices.ContainsFunc(s.APIKeys, func(sk snapshot.APIKey) bool { return sk.Prefix == prefix })
	})
	return true
}

func (a *API) listKeys(w http.ResponseWriter, r *http.Request, c caller) {
	p, ok := parsePage(w, r)
	if !ok {
		return
	}
	g, ok := a.loadGroup(w, r, c)
	if !ok {
		return
	}
	keys, err := a.groupKeys(r.Context(), c.namespace, g.Name)
	if err != nil {
		writeKubeError(w, r, "list api keys", err)
		return
	}
	prefixes := make([]string, len(keys))
	for i, k := range keys {
		prefixes[i] = keyPrefix(k)
	}
	sel, more := p.slice(prefixes)
	items := make([]keyJSON, 0, len(sel))
	for _, i := range sel {
		items = append(items, keyJSON{Prefix: prefixes[i], Name: keys[i].Spec.DisplayName})
	}
	writeJSON(w, http.StatusOK, newPage(items, more, prefixes, sel))
}

func (a *API) getKey(w http.ResponseWriter, r *http.Request, c caller) {
	k, ok := a.loadKey(w, r, c)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, keyJSON{Prefix: keyPrefix(k), Name: k.Spec.DisplayName})
}

// deleteKey revokes a federated key; it stops authenticating as soon as the local snapshot drops it.
func (a *API) deleteKey(w http.ResponseWriter, r *http.Request, c caller) {
	k, ok := a.loadKey(w, r, c)
	if !ok {
		return
	}
	prefix := keyPrefix(k)
	if err := a.opts.Client.Delete(r.Context(), k, client.Preconditions{UID: &k.UID}); err != nil && !apierrors.IsNotFound(err) {
		writeKubeError(w, r, "delete api key", err)
		return
	}
	a.awaitSnapshot(r.Context(), c.namespace, "revoke api key "+prefix, func(s *snapshot.Snapshot) bool {
		return !slices.ContainsFunc(s.APIKeys, func(sk snapshot.APIKey) bool { return sk.Prefix == prefix })
	})
	writeJSON(w, http.StatusOK, map[string]string{"prefix": prefix})
}

func (a *API) loadKey(w http.ResponseWriter, r *http.Request, c caller) (*gatewayv1.APIKey, bool) {
	prefix := r.PathValue("api_key_prefix")
	if !validPrefix(prefix) {
		badRequest(w, "api_key_prefix", fmt.Sprintf("%q is not a key prefix: a prefix is 16 printable characters.", prefix))
		return nil, false
	}
	g, ok := a.loadGroup(w, r, c)
	if !ok {
		return nil, false
	}
	k, err := a.findAPIKey(r.Context(), c.namespace, prefix)
	if err != nil {
		writeKubeError(w, r, "list api keys", err)
		return nil, false
	}
	if k == nil || k.Spec.GroupID != g.Name {
		notFound(w, "API key", prefix)
		return nil, false
	}
	return k, true
}

// groupKeys lists the live keys of a group that have a prefix, sorted by prefix.
func (a *API) groupKeys(ctx context.Context, ns, groupID string) ([]*gatewayv1.APIKey, error) {
	var list gatewayv1.APIKeyList
	if err := a.opts.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{gatewayv1.FieldAPIKeyGroup: groupID}); err != nil {
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
func (a *API) findAPIKey(ctx context.Context, ns, prefix string) (*gatewayv1.APIKey, error) {
	for _, f := range []string{gatewayv1.FieldSpecPrefix, gatewayv1.FieldStatusPrefix} {
		var list gatewayv1.APIKeyList
		if err := a.opts.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{f: prefix}); err != nil {
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
func (a *API) workspacePublicKey(ctx context.Context, ns string) (ed25519.PublicKey, error) {
	var list gatewayv1.WorkspaceList
	if err := a.opts.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
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
