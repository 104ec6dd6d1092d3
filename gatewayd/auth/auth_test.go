package auth

import (
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/view"
)

func TestCredentials(t *testing.T) {
	for _, tc := range []struct {
		header string
		scheme Scheme
		cred   string
	}{
		{"", SchemeNone, ""},
		{"Bearer", SchemeNone, ""},
		{"Bearer   ", SchemeNone, ""},
		{"Bearer abc", SchemeBearer, "abc"},
		{"bearer  abc ", SchemeBearer, "abc"},
		{"Api-Key abc", SchemeAPIKey, "abc"},
		{"API-KEY abc", SchemeAPIKey, "abc"},
		{"Basic abc", SchemeOther, "abc"},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		scheme, cred := Credentials(r)
		if scheme != tc.scheme || cred != tc.cred {
			t.Errorf("%q: got (%d, %q), want (%d, %q)", tc.header, scheme, cred, tc.scheme, tc.cred)
		}
	}
}

func TestFederatedRefusesOtherSchemes(t *testing.T) {
	v := view.Empty()
	for header, want := range map[string]string{
		"":                "Missing API key: send 'Authorization: Api-Key <key>'.",
		"Bearer k":        "Federated API keys use the Api-Key scheme, not Bearer: send 'Authorization: Api-Key <key>'.",
		"Basic k":         "Unsupported authorization scheme: send 'Authorization: Api-Key <key>'.",
		"Api-Key unknown": "Invalid API key.",
	} {
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", header)
		k, err := Federated(r, v)
		if k != nil || err == nil || err.Status != http.StatusUnauthorized || err.Message != want {
			t.Errorf("%q: got key %v, error %+v; want 401 %q", header, k, err, want)
		}
	}
}

func TestWorkspace(t *testing.T) {
	lookup := func(k string) (Caller, bool) {
		if k == "good" {
			return NewCaller("ns", snapshot.WorkspaceAPIKey{Prefix: "p", Type: "WORKSPACE_INVOKE", Models: []string{"m1"}}, nil), true
		}
		return Caller{}, false
	}
	for header, status := range map[string]int{"": 401, "Basic good": 401, "Bearer bad": 401, "Bearer good": 0, "Api-Key good": 0} {
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", header)
		c, err := Workspace(r, lookup)
		switch {
		case status == 0 && (err != nil || c.Namespace != "ns" || c.Principal().KeyPrefix != "p"):
			t.Errorf("%q: got %+v, %+v; want the key of ns", header, c, err)
		case status != 0 && (err == nil || err.Status != status):
			t.Errorf("%q: got %+v; want %d", header, err, status)
		}
	}
}

// TestPrincipal checks that a PERSONAL key acts with its owner's roles as the snapshot in force lists them, and
// with the role on the key only while the Workspace does not list its members.
func TestPrincipal(t *testing.T) {
	personal := func(user, role string) snapshot.WorkspaceAPIKey {
		return snapshot.WorkspaceAPIKey{Prefix: "pk-" + user, Type: "PERSONAL", Owner: &snapshot.KeyOwner{UserID: user, Role: role}}
	}
	teams := []snapshot.Team{
		{ID: "blue", Members: []snapshot.Member{{UserID: "ada", Role: "MEMBER"}}},
		{ID: "ml", Members: []snapshot.Member{{UserID: "ada", Role: "ADMIN"}, {UserID: "zed", Role: "MEMBER"}}},
	}
	managed := &snapshot.Snapshot{Teams: teams, Workspace: snapshot.Workspace{MembershipManaged: true,
		Members: []snapshot.Member{{UserID: "ada", Role: "MEMBER"}, {UserID: "bob", Role: "ADMIN"}}}}
	legacy := &snapshot.Snapshot{Teams: teams}
	for _, tc := range []struct {
		name   string
		key    snapshot.WorkspaceAPIKey
		s      *snapshot.Snapshot
		member bool
		role   gatewayv1.OrgRole
		teams  map[string]gatewayv1.TeamRole
	}{
		{"listed member: the Workspace's role wins over the key's", personal("ada", "ADMIN"), managed, true, gatewayv1.OrgRoleMember,
			map[string]gatewayv1.TeamRole{"blue": gatewayv1.TeamRoleMember, "ml": gatewayv1.TeamRoleAdmin}},
		{"listed admin", personal("bob", "MEMBER"), managed, true, gatewayv1.OrgRoleAdmin, nil},
		{"owner no longer listed: deprovisioned, team roles ignored", personal("zed", "ADMIN"), managed, false, "", nil},
		{"legacy: the role on the key", personal("bob", "ADMIN"), legacy, true, gatewayv1.OrgRoleAdmin, nil},
		{"legacy: team roles still come from the Teams", personal("zed", "MEMBER"), legacy, true, gatewayv1.OrgRoleMember,
			map[string]gatewayv1.TeamRole{"ml": gatewayv1.TeamRoleMember}},
		{"no snapshot loaded: the role on the key", personal("bob", "ADMIN"), nil, true, gatewayv1.OrgRoleAdmin, nil},
		{"a PERSONAL key without an owner acts as no one", snapshot.WorkspaceAPIKey{Prefix: "x", Type: "PERSONAL"}, managed, false, "", nil},
	} {
		p := NewCaller("ns", tc.key, tc.s).Principal()
		if p.Member != tc.member || p.OrgRole != tc.role || !maps.Equal(p.TeamRoles, tc.teams) {
			t.Errorf("%s: got member %v, role %q, teams %v; want %v, %q, %v", tc.name, p.Member, p.OrgRole, p.TeamRoles,
				tc.member, tc.role, tc.teams)
		}
	}

	team := snapshot.WorkspaceAPIKey{Prefix: "in-ml", Type: "WORKSPACE_INVOKE", TeamID: "ml", Models: []string{"m1"},
		Environments: []string{"staging"}, CreatedBy: &snapshot.KeyCreator{UserID: "ada"}}
	p := NewCaller("ns", team, managed).Principal()
	if p.KeyType != gatewayv1.KeyTypeInvoke || p.KeyTeamID != "ml" || !slices.Equal(p.KeyModels, []string{"m1"}) ||
		!slices.Equal(p.KeyEnvironments, []string{"staging"}) || !p.Member || p.UserID != "" || p.TeamRoles != nil {
		t.Errorf("a team key carries its own scope and never its creator's roles: %+v", p)
	}
}
