package auth

import (
	"net/http"
	"testing"

	"github.com/modelgate/modelgate/api/apikey"
	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/view"
)

func mint(t *testing.T, kind string) string {
	t.Helper()
	k, err := apikey.Mint(kind)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestModelAPI: the OpenAI-compatible routes take a workspace key in either scheme and a federated key in the
// Api-Key scheme only; every refusal is a 401 that says what to send.
func TestModelAPI(t *testing.T) {
	fed, ws := mint(t, apikey.Federated), mint(t, apikey.Workspace)
	s := &snapshot.Snapshot{Namespace: "ns",
		Groups:           []snapshot.Group{{ID: "g", ExternalEntityID: "ext-g", Mode: "INDEPENDENT", Depth: 1}},
		APIKeys:          []snapshot.APIKey{{ID: "k", Prefix: apikey.Prefix(fed), Hash: apikey.Hash(fed), GroupID: "g"}},
		WorkspaceAPIKeys: []snapshot.WorkspaceAPIKey{{ID: "w", Prefix: apikey.Prefix(ws), Hash: apikey.Hash(ws), Type: "WORKSPACE_INVOKE"}},
	}
	ns, err := view.Build(s, 1, "sum", limits.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	v := view.Empty().With(ns)
	lookup := ViewLookup(func() *view.View { return v })
	for _, tc := range []struct {
		header string
		// want is "federated", "workspace" or the 401's message.
		want string
	}{
		{"Api-Key " + fed, "federated"},
		{"api-key " + fed, "federated"},
		{"Bearer " + fed, "Federated API keys use the Api-Key scheme, not Bearer: send 'Authorization: Api-Key <key>'."},
		{"Bearer " + ws, "workspace"},
		{"Api-Key " + ws, "workspace"},
		{"", "Missing API key: send 'Authorization: Api-Key <key>', or Bearer <key> for a workspace key."},
		{"Basic " + ws, "Unsupported authorization scheme: send 'Authorization: Api-Key <key>', or Bearer <key> for a workspace key."},
		{"Bearer " + ws[:17] + "x", "Invalid API key."},
		{"Api-Key " + fed[:17] + "x", "Invalid API key."},
	} {
		r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		k, c, err := ModelAPI(r, v, lookup)
		got := ""
		switch {
		case err != nil && (k != nil || c != nil):
			t.Errorf("%q: an error and a key: %+v %+v %+v", tc.header, k, c, err)
		case err != nil && err.Status != http.StatusUnauthorized:
			t.Errorf("%q: status %d, want 401", tc.header, err.Status)
		case err != nil:
			got = err.Message
		case k != nil && c == nil && k.ID == "k":
			got = "federated"
		case c != nil && k == nil && c.Key.ID == "w" && c.Namespace == "ns":
			got = "workspace"
		}
		if got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.header, got, tc.want)
		}
	}
}
