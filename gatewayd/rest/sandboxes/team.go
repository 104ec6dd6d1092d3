package sandboxes

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// CodeTeamRequired answers a caller with several accessible teams that selected none.
const CodeTeamRequired = "team_required"

// SelectTeam is the team table of the sandbox routes (docs/rest-api.md "Sandbox images"), as a pure function. header is X-Team-Id, query is
// team_id, teams returns the workspace's team ids (sorted; called only once the selectors agree) and decide is
// authz.Decide(ActionSandbox) for a team.
//
//   - both given and different: 400 naming team_id, before any look-up;
//   - one given (or both, equal): that team, 404 when the workspace has no such team, 403 when the caller may not
//     act for it;
//   - neither: the caller's only accessible team; 400 team_required with several; 403 with none.
func SelectTeam(header, query string, teams func() []string, decide func(team string) authz.Decision) (string, *httperr.Error) {
	header, query = strings.TrimSpace(header), strings.TrimSpace(query)
	if header != "" && query != "" && header != query {
		return "", httperr.New(http.StatusBadRequest, httperr.CodeInvalidRequest,
			"The header X-Team-Id and the query parameter team_id name different teams; send one, or the same team in both.",
			[]httperr.FieldError{{Field: "team_id", Message: "must equal X-Team-Id when both are given"}})
	}
	all := teams()
	if given := max(header, query); given != "" {
		if _, found := slices.BinarySearch(all, given); !found {
			return "", httperr.New(http.StatusNotFound, httperr.CodeNotFound, fmt.Sprintf("Team %q not found.", given),
				map[string]string{"id": given})
		}
		if dec := decide(given); !dec.Allowed {
			return "", httperr.New(http.StatusForbidden, httperr.CodeForbidden, dec.Reason,
				[]httperr.FieldError{{Field: "team_id", Message: "names a team this key does not act for"}})
		}
		return given, nil
	}
	var accessible []string
	for _, t := range all {
		if decide(t).Allowed {
			accessible = append(accessible, t)
		}
	}
	switch len(accessible) {
	case 0:
		return "", httperr.New(http.StatusForbidden, httperr.CodeForbidden,
			"This key has no accessible team, so it cannot push or read sandbox images.",
			[]httperr.FieldError{{Field: "team_id", Message: "no team of this workspace is accessible to this key"}})
	case 1:
		return accessible[0], nil
	}
	return "", httperr.New(http.StatusBadRequest, CodeTeamRequired,
		"This key can act for several teams; select one with the header X-Team-Id or the query parameter team_id.",
		[]httperr.FieldError{{Field: "team_id", Message: "must name one of the teams this key acts for: " + strings.Join(accessible, ", ")}})
}
