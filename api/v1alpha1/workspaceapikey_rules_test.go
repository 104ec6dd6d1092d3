package v1alpha1

import "testing"

func TestCreatorFromAnnotation(t *testing.T) {
	for _, tc := range []struct {
		in       string
		user, by string
		ok       bool
	}{
		{"user:alice", "alice", "", true},
		{"key:mgw_AAAAAAAAAAAA", "", "mgw_AAAAAAAAAAAA", true},
		{"user:", "", "", false},
		{"key:", "", "", false},
		{"", "", "", false},
		{"alice", "", "", false},
		{"User:alice", "", "", false},
	} {
		c, ok := CreatorFromAnnotation(tc.in)
		if ok != tc.ok || (ok && (c.UserID != tc.user || c.APIKeyPrefix != tc.by)) {
			t.Errorf("CreatorFromAnnotation(%q) = %+v, %v; want user %q key %q, %v", tc.in, c, ok, tc.user, tc.by, tc.ok)
		}
	}
}

func TestNameScope(t *testing.T) {
	key := func(typ WorkspaceKeyType, team, owner string) *WorkspaceAPIKey {
		k := &WorkspaceAPIKey{Spec: WorkspaceAPIKeySpec{Type: typ, TeamID: team}}
		if owner != "" {
			k.Spec.Owner = &KeyOwner{UserID: owner}
		}
		return k
	}
	for _, tc := range []struct {
		name     string
		a, b     *WorkspaceAPIKey
		conflict bool
	}{
		{"invoke and manage-all keys of one team share a scope", key(KeyTypeInvoke, "ml", ""), key(KeyTypeManageAll, "ml", ""), true},
		{"metrics key shares its team's scope", key(KeyTypeExportMetrics, "ml", ""), key(KeyTypeInvoke, "ml", ""), true},
		{"two teams are two scopes", key(KeyTypeInvoke, "ml", ""), key(KeyTypeInvoke, "web", ""), false},
		{"workspace-wide team keys share a scope", key(KeyTypeInvoke, "", ""), key(KeyTypeManageAll, "", ""), true},
		{"a workspace-wide team key is not in a team's scope", key(KeyTypeInvoke, "", ""), key(KeyTypeInvoke, "ml", ""), false},
		{"one user's personal keys share a scope", key(KeyTypePersonal, "", "u1"), key(KeyTypePersonal, "", "u1"), true},
		{"two users' personal keys do not", key(KeyTypePersonal, "", "u1"), key(KeyTypePersonal, "", "u2"), false},
		{"management keys share the workspace", key(KeyTypeManageAPIKeys, "", ""), key(KeyTypeManageAPIKeys, "", ""), true},
		{"a management key is not in the workspace-wide team scope", key(KeyTypeManageAPIKeys, "", ""), key(KeyTypeInvoke, "", ""), false},
		{"a personal key is not in a team scope", key(KeyTypePersonal, "", "ml"), key(KeyTypeInvoke, "ml", ""), false},
	} {
		if got := tc.a.NameScope() == tc.b.NameScope(); got != tc.conflict {
			t.Errorf("%s: scopes %q and %q conflict = %v, want %v", tc.name, tc.a.NameScope(), tc.b.NameScope(), got, tc.conflict)
		}
	}
}
