package sandboxes

import (
	"strings"
	"testing"

	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
)

func TestSelectTeam(t *testing.T) {
	list := []string{"blue", "green", "red"}
	teams := func() []string { return list }
	none := func() []string { return nil }
	unread := func() []string {
		t.Errorf("the teams were read although the team selectors disagree")
		return nil
	}
	// allow answers Decide for a caller that acts for exactly the teams listed.
	allow := func(ok ...string) func(string) authz.Decision {
		return func(team string) authz.Decision {
			for _, o := range ok {
				if o == team {
					return authz.Decision{Allowed: true}
				}
			}
			return authz.Decision{Reason: "This key does not act for that team."}
		}
	}
	// never fails the test if the decision is asked: the mismatch is refused before any look-up.
	never := func(string) authz.Decision {
		t.Errorf("Decide was asked although the team selectors disagree")
		return authz.Decision{}
	}
	tests := []struct {
		name          string
		header, query string
		teams         func() []string
		decide        func(string) authz.Decision
		want          string
		wantStatus    int
		wantCode      string
	}{
		{"header and query differ", "red", "blue", unread, never, "", 400, httperr.CodeInvalidRequest},
		{"header and query differ, even for unknown teams", "x", "y", unread, never, "", 400, httperr.CodeInvalidRequest},
		{"header and query equal", "red", "red", teams, allow("red"), "red", 0, ""},
		{"header only", "red", "", teams, allow("red", "blue"), "red", 0, ""},
		{"query only", "", "blue", teams, allow("red", "blue"), "blue", 0, ""},
		{"given team the caller may not act for", "green", "", teams, allow("red"), "", 403, httperr.CodeForbidden},
		{"given team that does not exist", "", "violet", teams, allow("red"), "", 404, httperr.CodeNotFound},
		{"neither, one accessible team", "", "", teams, allow("green"), "green", 0, ""},
		{"neither, several accessible teams", "", "", teams, allow("green", "red"), "", 400, CodeTeamRequired},
		{"neither, every team accessible (workspace key)", "", "", teams, allow(list...), "", 400, CodeTeamRequired},
		{"neither, no accessible team", "", "", teams, allow(), "", 403, httperr.CodeForbidden},
		{"neither, workspace without teams", "", "", none, allow(), "", 403, httperr.CodeForbidden},
		{"whitespace-only selectors count as absent", " ", "", teams, allow("red"), "red", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SelectTeam(tc.header, tc.query, tc.teams, tc.decide)
			if tc.wantStatus == 0 {
				if err != nil || got != tc.want {
					t.Fatalf("SelectTeam = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("SelectTeam = %q, want status %d", got, tc.wantStatus)
			}
			if err.Status != tc.wantStatus || err.Code != tc.wantCode {
				t.Fatalf("SelectTeam error = %d %s (%s), want %d %s", err.Status, err.Code, err.Message, tc.wantStatus, tc.wantCode)
			}
			if got != "" {
				t.Errorf("a refusal returned team %q", got)
			}
		})
	}
}

// TestTeamRequiredNamesTheTeams: with several accessible teams and none selected, the refusal names team_id in
// the list of {field, message} of every refused field, and its message lists the teams the key may choose.
func TestTeamRequiredNamesTheTeams(t *testing.T) {
	_, err := SelectTeam("", "", func() []string { return []string{"blue", "green", "red"} },
		func(team string) authz.Decision { return authz.Decision{Allowed: team != "blue"} })
	fields, ok := err.Detail.([]httperr.FieldError)
	if err == nil || err.Code != CodeTeamRequired || !ok || len(fields) != 1 || fields[0].Field != "team_id" ||
		!strings.HasSuffix(fields[0].Message, ": green, red") {
		t.Fatalf("SelectTeam = %#v, want team_required naming team_id and the teams green, red", err)
	}
}
