package inference

import (
	"net/http"
	"slices"
	"strings"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// modelEntry is one model of OpenAI's models list.
type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelList is OpenAI's models list.
type modelList struct {
	Object string       `json:"object"`
	Data   []modelEntry `json:"data"`
}

// ModelList answers GET /v1/models when r presents a federated key (in the Api-Key or Bearer scheme, or in
// x-api-key as Anthropic's clients send it): OpenAI's list of the slugs the key's group may call and an Endpoint
// routes, in slug order (docs/rest-api.md "Models list"). It reports false, having written nothing, for any other
// caller, whose GET /v1/models is the model platform's list.
func (h *Handler) ModelList(w http.ResponseWriter, r *http.Request) bool {
	_, cred := auth.Credentials(r)
	if cred == "" {
		cred = strings.TrimSpace(r.Header.Get("X-Api-Key"))
	}
	if cred == "" {
		return false
	}
	v := h.opts.View()
	key := v.LookupKey(cred)
	if key == nil {
		return false
	}
	ns := v.Namespace(key.Group.Namespace)
	list := modelList{Object: "list", Data: []modelEntry{}}
	for slug := range key.Group.Models {
		if ns != nil && ns.Endpoints[slug] != nil {
			list.Data = append(list.Data, modelEntry{ID: slug, Object: "model", OwnedBy: "modelgate"})
		}
	}
	slices.SortFunc(list.Data, func(a, b modelEntry) int { return strings.Compare(a.ID, b.ID) })
	httperr.WriteJSON(w, http.StatusOK, list)
	return true
}
