// Package teams serves GET /v1/teams: the teams of the workspace that the caller may list, as authz.Decide says,
// so a key finds the team ids it scopes keys and models with.
package teams

import (
	"net/http"
	"time"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// Register adds the routes of this package to mux.
func Register(mux ingress.Mux, k *kit.Kit) {
	k.Handle(mux, "GET /v1/teams", kit.AccessTeams, func(w http.ResponseWriter, r *http.Request, c auth.Caller) {
		list(k, w, r, c)
	})
}

type teamJSON struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Default   bool   `json:"default"`
	CreatedAt string `json:"created_at"`
}

// list answers {teams: [...]}, sorted by id, leaving out the teams the caller does not see.
func list(k *kit.Kit, w http.ResponseWriter, r *http.Request, c auth.Caller) {
	teams, err := kit.Teams(r.Context(), k.ListReader(), c.Namespace)
	if err != nil {
		kit.WriteKubeError(w, r, "list teams", err)
		return
	}
	out := make([]teamJSON, 0, len(teams))
	for _, t := range teams {
		if !c.Decide(authz.ActionListTeams, authz.Resource{TeamID: t.Name}).Allowed {
			continue
		}
		out = append(out, teamJSON{ID: t.Name, Name: t.Spec.DisplayName, Default: t.Spec.Default,
			CreatedAt: t.CreationTimestamp.UTC().Format(time.RFC3339)})
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"teams": out})
}
