package authz

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// update rewrites the permission table of docs/rest-api.md: go test ./gatewayd/authz -update. Review the diff
// before committing.
var update = flag.Bool("update", false, "rewrite the permission table of docs/rest-api.md from the golden rows")

const (
	docsPath   = "docs/rest-api.md"
	tableBegin = "<!-- permission-table:begin -->"
	tableEnd   = "<!-- permission-table:end -->"
)

// PermissionTable renders rows as the Markdown table of docs/rest-api.md: one line per row, with the answer and
// the rule Decide gives and the sentence the row checks.
func PermissionTable(rows []row) string {
	var b strings.Builder
	b.WriteString("| Key | Action | On | Answer | Rule | Checks |\n|---|---|---|---|---|---|\n")
	for _, tc := range rows {
		d := Decide(tc.principal, tc.action, tc.resource)
		cells := []string{describePrincipal(tc.principal), tc.action.String(), describeResource(tc.action, tc.resource),
			string(answerOf(d)), d.Reason, tc.sentence}
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// TestPermissionTableMatchesDocs compares the golden rows with the table of docs/rest-api.md, or rewrites it with
// -update.
func TestPermissionTableMatchesDocs(t *testing.T) {
	path := filepath.Join(repoRoot(t), docsPath)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	head, rest, ok := strings.Cut(doc, tableBegin+"\n")
	current, tail, ok2 := strings.Cut(rest, tableEnd)
	if !ok || !ok2 {
		t.Fatalf("%s has no section between %q and %q lines", docsPath, tableBegin, tableEnd)
	}
	want := PermissionTable(golden)
	if current == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(head+tableBegin+"\n"+want+tableEnd+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the permission table of %s differs from the golden rows of gatewayd/authz; run "+
		"`go test ./gatewayd/authz -update` and review the diff.\nFirst difference:\n%s", docsPath, firstDiff(current, want))
}

// firstDiff shows the first line where the docs and the generated table part.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		gl, wl := lineAt(g, i), lineAt(w, i)
		if gl != wl {
			return fmt.Sprintf("  line %d of the table\n  docs:      %s\n  generated: %s", i+1, gl, wl)
		}
	}
	return "  (none)"
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of table)"
}

// repoRoot walks up from the test's directory to the directory that holds go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("found no go.mod above the test's directory")
		}
		dir = parent
	}
}

// describeRow is a row's question in one line, as the table shows it.
func describeRow(tc row) string {
	return describePrincipal(tc.principal) + " | " + tc.action.String() + " | " + describeResource(tc.action, tc.resource)
}

// describePrincipal names a key by type, owner and roles (PERSONAL) or by type, creator's absence, team and scope.
func describePrincipal(p Principal) string {
	if p.KeyType != gatewayv1.KeyTypePersonal {
		return fmt.Sprintf("`%s`%s", p.KeyType, describeScope(p))
	}
	if !p.Member {
		return fmt.Sprintf("`PERSONAL` of %s, who left the workspace", p.UserID)
	}
	roles := []string{"org " + string(p.OrgRole)}
	for _, id := range slices.Sorted(maps.Keys(p.TeamRoles)) {
		roles = append(roles, id+" "+string(p.TeamRoles[id]))
	}
	return fmt.Sprintf("`PERSONAL` of %s (%s)", p.UserID, strings.Join(roles, ", "))
}

func describeScope(p Principal) string {
	if p.KeyType == gatewayv1.KeyTypeManageAPIKeys {
		return " " + p.KeyPrefix
	}
	parts := []string{"whole workspace"}
	if p.KeyTeamID != "" {
		parts[0] = "team " + p.KeyTeamID
	}
	if len(p.KeyModels) > 0 {
		parts = append(parts, "models "+strings.Join(p.KeyModels, ", "))
	}
	if len(p.KeyEnvironments) > 0 {
		parts = append(parts, "environments "+strings.Join(p.KeyEnvironments, ", "))
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// describeResource reads the fields of r that action a uses.
func describeResource(a Action, r Resource) string {
	switch a {
	case ActionInvoke, ActionManageModels:
		return fmt.Sprintf("model %s of %s in %s", r.ModelID, teamName(r.TeamID), r.Environment)
	case ActionListModels:
		if r.ModelID == "" {
			return "the route"
		}
		return fmt.Sprintf("model %s of %s", r.ModelID, teamName(r.TeamID))
	case ActionListTeams:
		if r.TeamID == "" {
			return "the route"
		}
		return teamName(r.TeamID)
	case ActionExportMetrics, ActionSandbox:
		if r.TeamID == "" {
			return "the workspace"
		}
		return teamName(r.TeamID)
	case ActionManageGateway:
		return "groups, federated keys, endpoints, usage"
	case ActionKeyCreate:
		return fmt.Sprintf("new `%s` key%s", r.KeyType, keyTeam(r))
	case ActionKeySee:
		if r.KeyPrefix == "" {
			return "the key routes"
		}
	}
	return describeKey(r)
}

// describeKey names a target key by type, team, owner or creator, and prefix.
func describeKey(r Resource) string {
	if r.KeyType == gatewayv1.KeyTypePersonal {
		return fmt.Sprintf("`PERSONAL` key of %s", r.KeyOwner)
	}
	by := "a key-management key"
	if r.KeyCreatedBy != "" {
		by = r.KeyCreatedBy
	}
	return fmt.Sprintf("`%s` key %s%s, created by %s", r.KeyType, r.KeyPrefix, keyTeam(r), by)
}

func keyTeam(r Resource) string {
	if r.KeyType == gatewayv1.KeyTypePersonal || r.KeyType == gatewayv1.KeyTypeManageAPIKeys {
		return ""
	}
	if r.TeamID == "" {
		return " for the whole workspace"
	}
	return " for team " + r.TeamID
}

func teamName(id string) string {
	if id == "" {
		return "no team"
	}
	return "team " + id
}
