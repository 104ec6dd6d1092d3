package translate

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

func TestKeysToRevoke(t *testing.T) {
	personal := func(name, owner string) gatewayv1.WorkspaceAPIKey {
		k := gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Name: name}}
		k.Spec.Type = gatewayv1.KeyTypePersonal
		if owner != "" {
			k.Spec.Owner = &gatewayv1.KeyOwner{UserID: owner}
		}
		return k
	}
	team := func(name string, t gatewayv1.WorkspaceKeyType, creator string) gatewayv1.WorkspaceAPIKey {
		k := gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Name: name}}
		k.Spec.Type, k.Spec.TeamID = t, "ml"
		k.Spec.CreatedBy = &gatewayv1.KeyCreator{UserID: creator}
		return k
	}
	deleting := func(k gatewayv1.WorkspaceAPIKey) gatewayv1.WorkspaceAPIKey {
		k.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		return k
	}
	workspace := func(members ...string) *gatewayv1.Workspace {
		ws := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
		ws.Spec.Members = []gatewayv1.WorkspaceMember{}
		for _, m := range members {
			ws.Spec.Members = append(ws.Spec.Members, gatewayv1.WorkspaceMember{UserID: m, Role: gatewayv1.OrgRoleMember})
		}
		return ws
	}
	for _, tc := range []struct {
		name string
		ws   *gatewayv1.Workspace
		keys []gatewayv1.WorkspaceAPIKey
		want []string
	}{
		{"no Workspace: nothing is managed", nil, []gatewayv1.WorkspaceAPIKey{personal("a", "alice")}, nil},
		{"membership not adopted (members unset): nobody is deprovisioned",
			&gatewayv1.Workspace{}, []gatewayv1.WorkspaceAPIKey{personal("a", "alice")}, nil},
		{"listed owner keeps the key", workspace("alice"), []gatewayv1.WorkspaceAPIKey{personal("a", "alice")}, nil},
		{"unlisted owner loses every personal key", workspace("alice"),
			[]gatewayv1.WorkspaceAPIKey{personal("a", "alice"), personal("c1", "carol"), personal("c2", "carol")}, []string{"c1", "c2"}},
		{"empty member list (adopted, nobody listed) revokes every personal key", workspace(),
			[]gatewayv1.WorkspaceAPIKey{personal("a", "alice")}, []string{"a"}},
		{"team keys a removed member created stay, of every type", workspace("alice"), []gatewayv1.WorkspaceAPIKey{
			team("t1", gatewayv1.KeyTypeInvoke, "carol"), team("t2", gatewayv1.KeyTypeManageAll, "carol"),
			team("t3", gatewayv1.KeyTypeExportMetrics, "carol")}, nil},
		{"a key-management key a removed member created stays", workspace("alice"), []gatewayv1.WorkspaceAPIKey{
			{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAPIKeys,
				CreatedBy: &gatewayv1.KeyCreator{UserID: "carol"}}}}, nil},
		{"a key already being deleted is not deleted again", workspace("alice"),
			[]gatewayv1.WorkspaceAPIKey{deleting(personal("c1", "carol")), personal("c2", "carol")}, []string{"c2"}},
		{"a personal key without owner belongs to nobody listed", workspace("alice"),
			[]gatewayv1.WorkspaceAPIKey{personal("x", "")}, []string{"x"}},
		{"user ids compare exactly", workspace("Carol"), []gatewayv1.WorkspaceAPIKey{personal("c", "carol")}, []string{"c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, k := range KeysToRevoke(tc.ws, tc.keys) {
				got = append(got, k.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("KeysToRevoke = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInChargeAndDefaultTeam(t *testing.T) {
	at := func(sec int64) metav1.Time { return metav1.Time{Time: time.Unix(sec, 0)} }
	del := &metav1.Time{Time: time.Unix(9, 0)}
	wss := []gatewayv1.Workspace{
		{ObjectMeta: metav1.ObjectMeta{Name: "oldest-deleting", CreationTimestamp: at(1), DeletionTimestamp: del}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", CreationTimestamp: at(2)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: at(2)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "new", CreationTimestamp: at(3)}},
	}
	if got := InCharge(wss); got == nil || got.Name != "a" {
		t.Errorf("InCharge = %v, want a (oldest not being deleted, then by name)", got)
	}
	if got := InCharge(nil); got != nil {
		t.Errorf("InCharge(nil) = %v, want nil", got)
	}
	teams := []gatewayv1.Team{
		{ObjectMeta: metav1.ObjectMeta{Name: "old-plain", CreationTimestamp: at(1)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "old-deleting", CreationTimestamp: at(1), DeletionTimestamp: del}, Spec: gatewayv1.TeamSpec{Default: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: "newer", CreationTimestamp: at(3)}, Spec: gatewayv1.TeamSpec{Default: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: "older", CreationTimestamp: at(2)}, Spec: gatewayv1.TeamSpec{Default: true}},
	}
	if got := DefaultTeam(teams); got == nil || got.Name != "older" {
		t.Errorf("DefaultTeam = %v, want older", got)
	}
	if got := DefaultTeam(teams[:1]); got != nil {
		t.Errorf("DefaultTeam without a default = %v, want nil", got)
	}
}

// TestTeamKeysBoundToTheirTeam: a team key bound to its Team's UID is served only while that Team exists, not
// once it is deleted or being deleted, and not under a new Team of the same name; an unbound key (admitted before
// its Team existed) is not judged by its Team.
func TestTeamKeysBoundToTheirTeam(t *testing.T) {
	key := func(name, teamUID string) gatewayv1.WorkspaceAPIKey {
		k := gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Name: name}}
		k.Spec.Type, k.Spec.TeamID = gatewayv1.KeyTypeInvoke, "ml"
		k.Spec.Prefix, k.Spec.Hash = "mgw_"+name+strings.Repeat("x", 12-len(name)), strings.Repeat("a", 64)
		if teamUID != "" {
			k.Annotations = map[string]string{gatewayv1.AnnotationTeamUID: teamUID}
		}
		return k
	}
	team := func(uid string, deleting bool) gatewayv1.Team {
		tm := gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Name: "ml", UID: types.UID(uid)}}
		if deleting {
			tm.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
			tm.Finalizers = []string{"x"}
		}
		return tm
	}
	keys := []gatewayv1.WorkspaceAPIKey{key("bound", "uid-1"), key("unbound", "")}
	for _, tc := range []struct {
		name  string
		teams []gatewayv1.Team
		want  []string
	}{
		{"the Team it was bound to", []gatewayv1.Team{team("uid-1", false)}, []string{"bound", "unbound"}},
		{"its Team deleted", nil, []string{"unbound"}},
		{"its Team being deleted", []gatewayv1.Team{team("uid-1", true)}, []string{"unbound"}},
		{"a new Team of the same name", []gatewayv1.Team{team("uid-2", false)}, []string{"unbound"}},
	} {
		s := Translate(Input{Namespace: "ws", Teams: tc.teams, WorkspaceAPIKeys: keys})
		var got []string
		for _, k := range s.WorkspaceAPIKeys {
			got = append(got, k.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: served %v, want %v", tc.name, got, tc.want)
		}
	}
}
