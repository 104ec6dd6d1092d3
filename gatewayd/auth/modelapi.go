package auth

import (
	"net/http"

	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// ModelAPI authenticates the caller of an OpenAI-compatible route, which takes either kind of key: a workspace
// key in the Bearer or the Api-Key scheme (as Workspace does), or a federated key in the Api-Key scheme only (as
// Federated does). Exactly one of the key and the caller is set when the error is nil.
func ModelAPI(r *http.Request, v *view.View, lookup Lookup) (*view.Key, *Caller, *httperr.Error) {
	scheme, cred := Credentials(r)
	switch scheme {
	case SchemeNone:
		return nil, nil, unauthorized("Missing API key: " + apiKeyHint + ", or Bearer <key> for a workspace key.")
	case SchemeOther:
		return nil, nil, unauthorized("Unsupported authorization scheme: " + apiKeyHint + ", or Bearer <key> for a workspace key.")
	}
	if c, err := Workspace(r, lookup); err == nil {
		return nil, &c, nil
	}
	if scheme == SchemeBearer && v.LookupKey(cred) == nil {
		// Not a federated key in the wrong scheme either: the key is simply unknown.
		return nil, nil, unauthorized("Invalid API key.")
	}
	k, err := Federated(r, v)
	return k, nil, err
}
