package auth

import (
	"net/http"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
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
	lookup := func(k string) (string, snapshot.WorkspaceAPIKey, bool) {
		if k == "good" {
			return "ns", snapshot.WorkspaceAPIKey{Prefix: "p", Type: "WORKSPACE_INVOKE", Models: []string{"m1"}}, true
		}
		return "", snapshot.WorkspaceAPIKey{}, false
	}
	for header, status := range map[string]int{"": 401, "Basic good": 401, "Bearer bad": 401, "Bearer good": 0, "Api-Key good": 0} {
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", header)
		c, err := Workspace(r, lookup)
		switch {
		case status == 0 && (err != nil || c.Namespace != "ns"):
			t.Errorf("%q: got %+v, %+v; want the key of ns", header, c, err)
		case status != 0 && (err == nil || err.Status != status):
			t.Errorf("%q: got %+v; want %d", header, err, status)
		}
	}
}

func TestCallerAbilities(t *testing.T) {
	admin := &snapshot.KeyOwner{UserID: "u", Role: "ADMIN"}
	member := &snapshot.KeyOwner{UserID: "u", Role: "MEMBER"}
	for _, tc := range []struct {
		key                        snapshot.WorkspaceAPIKey
		gateway, keys, invoke, org bool
	}{
		{snapshot.WorkspaceAPIKey{Type: "WORKSPACE_MANAGE_ALL"}, true, false, true, false},
		{snapshot.WorkspaceAPIKey{Type: "WORKSPACE_INVOKE"}, false, false, true, false},
		{snapshot.WorkspaceAPIKey{Type: "WORKSPACE_EXPORT_METRICS"}, false, false, false, false},
		{snapshot.WorkspaceAPIKey{Type: "WORKSPACE_MANAGE_API_KEYS"}, false, true, false, false},
		{snapshot.WorkspaceAPIKey{Type: "PERSONAL", Owner: admin}, true, true, true, true},
		{snapshot.WorkspaceAPIKey{Type: "PERSONAL", Owner: member}, false, true, true, false},
	} {
		c := Caller{Key: tc.key}
		if c.MayManageGateway() != tc.gateway || c.MayManageKeys() != tc.keys || c.MayInvoke() != tc.invoke || c.IsOrgAdmin() != tc.org {
			t.Errorf("%s %+v: gateway %v keys %v invoke %v admin %v", tc.key.Type, tc.key.Owner,
				c.MayManageGateway(), c.MayManageKeys(), c.MayInvoke(), c.IsOrgAdmin())
		}
	}
	scoped := Caller{Key: snapshot.WorkspaceAPIKey{Models: []string{"m1"}}}
	if !scoped.MayCallModel("m1") || scoped.MayCallModel("m2") || !(Caller{}).MayCallModel("any") {
		t.Error("model scope: a scoped key calls only its models, an unscoped key any")
	}
}
