// Package azure is the AZURE_OPENAI provider: Azure OpenAI speaks OpenAI's wire, so the try's body and the usage
// of its answers are gatewayd/provider/openai's; what differs is the URL, which names the deployment (the
// target's targetModel) and the api-version (the target's apiVersion), and the key, sent in the api-key header
// (docs/routing.md "Providers").
package azure

import (
	"net/http"
	"net/url"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Kind is the provider name an Endpoint target gives.
const Kind = "AZURE_OPENAI"

func init() { provider.Register(Kind, Provider{}) }

// Provider is the AZURE_OPENAI provider. It has no state; it reads usage as the OPENAI provider does.
type Provider struct{ openai.Provider }

// Request is {baseURL}/openai/deployments/{deployment}{route}?api-version={apiVersion}, the deployment being the
// target's model (the client's model when the target names none), with the OPENAI provider's body.
func (Provider) Request(t *view.Target, call provider.Call) (string, []byte, error) {
	body, err := openai.RewriteBody(call.Body, t.TargetModel, call.Stream)
	if err != nil {
		return "", nil, err
	}
	deployment := t.TargetModel
	if deployment == "" {
		req, err := openai.ParseRequest(call.Body)
		if err != nil {
			return "", nil, err
		}
		deployment = req.Model
	}
	return t.BaseURL + "/openai/deployments/" + url.PathEscape(deployment) + call.Route + "?api-version=" + url.QueryEscape(t.APIVersion), body, nil
}

// Authorize sends the key in the api-key header.
func (Provider) Authorize(h http.Header, key string) { h.Set("api-key", key) }
