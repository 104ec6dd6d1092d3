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
	if scheme == SchemeAPIKey {
		// Federated keys first: they carry the gateway's traffic, and this costs them one lookup, as Federated does.
		if k := v.LookupKey(cred); k != nil {
			return k, nil, nil
		}
	}
	if c, err := Workspace(r, lookup); err == nil {
		return nil, &c, nil
	}
	if scheme == SchemeBearer && v.LookupKey(cred) != nil {
		_, err := Federated(r, v) // the 401 that tells a federated key to use Api-Key
		return nil, nil, err
	}
	return nil, nil, unauthorized("Invalid API key.")
}
