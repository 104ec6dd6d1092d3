package translate

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Kinds of key that share one prefix space: gatewayd finds any key of a workspace by its prefix.
const (
	KindAPIKey          = "APIKey"
	KindWorkspaceAPIKey = "WorkspaceAPIKey"
)

// KeyCredentials returns the prefix and hash a key is served with. A key registered or minted through the
// REST API carries them in its spec; a key read from a Secret or minted by the controller has them in status
// once its reconciler derived them. ok is false until both are known.
func KeyCredentials(src gatewayv1.KeySource, st gatewayv1.KeyStatus) (prefix, hash string, ok bool) {
	if src.Hash != "" {
		return src.Prefix, src.Hash, src.Prefix != ""
	}
	if src.SecretRef != nil && st.SecretName != "" {
		// status still describes a minted key while the spec now names a Secret: wait for the reconciler.
		return "", "", false
	}
	return st.Prefix, st.Hash, st.Prefix != "" && st.Hash != ""
}

// KeyRef identifies a key of either kind, with what decides which of two keys holds a prefix.
type KeyRef struct {
	Kind    string
	Name    string
	Created metav1.Time
}

// OlderKey reports whether a holds a prefix that both a and b claim: the older by creationTimestamp, then
// kind, then name.
func OlderKey(a, b KeyRef) bool {
	if !a.Created.Equal(&b.Created) {
		return a.Created.Before(&b.Created)
	}
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	return a.Name < b.Name
}

// Prefixes decides which key holds each prefix of a workspace: the oldest key, of either kind, that is not
// being deleted and whose credentials are known.
type Prefixes struct{ owner map[string]KeyRef }

// NewPrefixes indexes keys by prefix.
func NewPrefixes(keys []gatewayv1.APIKey, wkeys []gatewayv1.WorkspaceAPIKey) *Prefixes {
	p := &Prefixes{owner: make(map[string]KeyRef, len(keys)+len(wkeys))}
	for i := range keys {
		k := &keys[i]
		if prefix, _, ok := KeyCredentials(k.Spec.KeySource, k.Status); ok && k.DeletionTimestamp == nil {
			p.claim(prefix, KeyRef{Kind: KindAPIKey, Name: k.Name, Created: k.CreationTimestamp})
		}
	}
	for i := range wkeys {
		k := &wkeys[i]
		if prefix, _, ok := KeyCredentials(k.Spec.KeySource, k.Status); ok && k.DeletionTimestamp == nil {
			p.claim(prefix, KeyRef{Kind: KindWorkspaceAPIKey, Name: k.Name, Created: k.CreationTimestamp})
		}
	}
	return p
}

func (p *Prefixes) claim(prefix string, k KeyRef) {
	if cur, ok := p.owner[prefix]; !ok || OlderKey(k, cur) {
		p.owner[prefix] = k
	}
}

// Owns reports whether the key of that kind and name holds prefix.
func (p *Prefixes) Owns(kind, name, prefix string) bool {
	cur, ok := p.owner[prefix]
	return ok && cur.Kind == kind && cur.Name == name
}

// Describe renders a key reference for messages, for example "APIKey acme-prod".
func (k KeyRef) Describe() string { return strings.Join([]string{k.Kind, k.Name}, " ") }
