package authz

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// The rules the rows check, word for word from docs/rest-api.md "Key types and permission rules". Every one is
// cited by a row.
const (
	ruleTypes          = "Rule 1: A workspace key has one of five types: PERSONAL, WORKSPACE_MANAGE_ALL, WORKSPACE_INVOKE, WORKSPACE_EXPORT_METRICS, WORKSPACE_MANAGE_API_KEYS."
	rulePersonal       = "Rule 2: A PERSONAL key belongs to one user and may do what that user may do."
	ruleDeprovisioned  = "Rule 4: A PERSONAL key whose owner has left the workspace may do nothing; the manager then deletes it."
	ruleManageAll      = "Rule 5: A WORKSPACE_MANAGE_ALL key deploys, calls and manages models and the other resources of the workspace."
	ruleManageAllBound = "Rule 6: A WORKSPACE_MANAGE_ALL key acts for one team, or for the whole workspace."
	ruleInvoke         = "Rule 7: A WORKSPACE_INVOKE key calls models and does nothing else."
	ruleMetrics        = "Rule 8: A WORKSPACE_EXPORT_METRICS key reads metrics and does nothing else."
	ruleKeysList       = "Rule 9: A WORKSPACE_MANAGE_API_KEYS key lists teams and models, to find the ids that scope keys."
	ruleKeysCreate     = "Rule 10: A WORKSPACE_MANAGE_API_KEYS key creates team keys of every type, for any team."
	ruleKeysSee        = "Rule 11: A WORKSPACE_MANAGE_API_KEYS key sees the team keys and the members' PERSONAL keys."
	ruleKeysRevoke     = "Rule 12: A WORKSPACE_MANAGE_API_KEYS key revokes team keys and PERSONAL keys."
	ruleKeysCannot     = "Rule 13: A WORKSPACE_MANAGE_API_KEYS key neither calls nor manages models, and creates neither PERSONAL keys nor other key-management keys."
	ruleScoped         = "Rule 14: A WORKSPACE_MANAGE_ALL or WORKSPACE_INVOKE key may be limited to some environments, or to some models in some environments, and then calls only those."
	ruleMgmtKeys       = "Rule 15: Only organization admins create, rename or revoke key-management keys."
	ruleTeamAdmins     = "Rule 16: A team admin creates keys for their own teams."
	ruleAdmins         = "Rule 17: Organization admins see every team key and every member's PERSONAL key, and may revoke any of them."
	ruleAdminsRename   = "Rule 18: Organization admins may not rename another member's PERSONAL key."
	ruleTeamAdminsSee  = "Rule 19: Team admins also see every key of their teams."
	ruleOthers         = "Rule 20: Everyone else sees their own PERSONAL keys and the team keys they created."
	ruleList           = "Rule 21: The key list shows each caller exactly the keys these rules let it see."
	ruleMgmtSee        = "Rule 22: Key-management keys see and revoke team keys and PERSONAL keys across the workspace."
	ruleRoles          = "Rule 3: A PERSONAL key acts with the roles its owner holds when the call is made."
	ruleScope          = "Rule 23: A key's effective scope is its team's intersected with its own model and environment scope; an empty scope means all."
	ruleInvisible      = "Rule 24: Whatever the caller may not learn of (a model, team or key it does not act for) is answered 404, not 403."
	ruleWorkspaceKey   = "Rule 25: A team key with no team acts for every team of its workspace."
	ruleInvokers       = "Rule 26: PERSONAL, WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys call the model routes."
)

var sentences = []string{
	ruleTypes, rulePersonal, ruleDeprovisioned, ruleManageAll, ruleManageAllBound, ruleInvoke, ruleMetrics, ruleKeysList,
	ruleKeysCreate, ruleKeysSee, ruleKeysRevoke, ruleKeysCannot, ruleScoped, ruleMgmtKeys, ruleTeamAdmins, ruleAdmins, ruleAdminsRename,
	ruleTeamAdminsSee, ruleOthers, ruleList, ruleMgmtSee, ruleRoles, ruleScope, ruleInvisible, ruleWorkspaceKey, ruleInvokers,
}

// answer is what the HTTP layer makes of a Decision.
type answer string

const (
	allowed   answer = "allowed"
	forbidden answer = "403"
	notFound  answer = "404"
)

func answerOf(d Decision) answer {
	switch {
	case d.Allowed:
		return allowed
	case d.Hidden:
		return notFound
	}
	return forbidden
}

// row is one case of the golden table: a principal asks for an action on a resource.
type row struct {
	sentence  string
	principal Principal
	action    Action
	resource  Resource
	want      answer
}

// The callers: organization admin ada, member mo (MEMBER of red), tia (ADMIN of red, MEMBER of blue), gus (left),
// and team keys bound to red or to the whole workspace.
var (
	admin     = Principal{KeyType: gatewayv1.KeyTypePersonal, KeyPrefix: "pk-ada", UserID: "ada", OrgRole: gatewayv1.OrgRoleAdmin, Member: true}
	member    = Principal{KeyType: gatewayv1.KeyTypePersonal, KeyPrefix: "pk-mo", UserID: "mo", OrgRole: gatewayv1.OrgRoleMember, Member: true, TeamRoles: map[string]gatewayv1.TeamRole{"red": gatewayv1.TeamRoleMember}}
	teamAdmin = Principal{KeyType: gatewayv1.KeyTypePersonal, KeyPrefix: "pk-tia", UserID: "tia", OrgRole: gatewayv1.OrgRoleMember, Member: true, TeamRoles: map[string]gatewayv1.TeamRole{"red": gatewayv1.TeamRoleAdmin, "blue": gatewayv1.TeamRoleMember}}
	departed  = Principal{KeyType: gatewayv1.KeyTypePersonal, KeyPrefix: "pk-gus", UserID: "gus", OrgRole: gatewayv1.OrgRoleAdmin}

	manageAllRed    = Principal{KeyType: gatewayv1.KeyTypeManageAll, KeyPrefix: "ma-red", KeyTeamID: "red", UserID: "tia"}
	manageAllWS     = Principal{KeyType: gatewayv1.KeyTypeManageAll, KeyPrefix: "ma-ws", UserID: "ada"}
	manageAllScoped = Principal{KeyType: gatewayv1.KeyTypeManageAll, KeyPrefix: "ma-m1", KeyTeamID: "red", KeyModels: []string{"m1"}, KeyEnvironments: []string{"prod"}, UserID: "tia"}
	invokeRed       = Principal{KeyType: gatewayv1.KeyTypeInvoke, KeyPrefix: "in-red", KeyTeamID: "red", UserID: "tia"}
	invokeWS        = Principal{KeyType: gatewayv1.KeyTypeInvoke, KeyPrefix: "in-ws", UserID: "ada"}
	invokeScoped    = Principal{KeyType: gatewayv1.KeyTypeInvoke, KeyPrefix: "in-m1", KeyTeamID: "red", KeyModels: []string{"m1"}, KeyEnvironments: []string{"prod"}, UserID: "tia"}
	invokeProd      = Principal{KeyType: gatewayv1.KeyTypeInvoke, KeyPrefix: "in-prod", KeyTeamID: "red", KeyEnvironments: []string{"prod"}, UserID: "tia"}
	metricsRed      = Principal{KeyType: gatewayv1.KeyTypeExportMetrics, KeyPrefix: "em-red", KeyTeamID: "red", UserID: "tia"}
	keyManager      = Principal{KeyType: gatewayv1.KeyTypeManageAPIKeys, KeyPrefix: "mk-1", UserID: "ada"}
	unknownType     = Principal{KeyType: "LEGACY", KeyPrefix: "lg-1"}
)

// model is a model of team (""= none) called or managed in env.
func model(id, team, env string) Resource {
	return Resource{ModelID: id, TeamID: team, Environment: env}
}

// team is a team as a listed item, sandbox or metrics selector.
func team(id string) Resource { return Resource{TeamID: id} }

// newKey is a key to create.
func newKey(t gatewayv1.WorkspaceKeyType, team string) Resource {
	return Resource{KeyType: t, TeamID: team}
}

// personalKey is the PERSONAL key of owner.
func personalKey(owner string) Resource {
	return Resource{KeyType: gatewayv1.KeyTypePersonal, KeyPrefix: "pk-" + owner, KeyOwner: owner, KeyCreatedBy: owner}
}

// teamKey is a key of type t for team, created by the user createdBy ("" = by a key-management key).
func teamKey(t gatewayv1.WorkspaceKeyType, team, createdBy, prefix string) Resource {
	return Resource{KeyType: t, TeamID: team, KeyCreatedBy: createdBy, KeyPrefix: prefix}
}

var (
	invokeKeyRedByMo  = teamKey(gatewayv1.KeyTypeInvoke, "red", "mo", "in-mo")
	invokeKeyRedByTia = teamKey(gatewayv1.KeyTypeInvoke, "red", "tia", "in-tia")
	invokeKeyRedByKey = teamKey(gatewayv1.KeyTypeInvoke, "red", "", "in-mk")
	invokeKeyBlue     = teamKey(gatewayv1.KeyTypeInvoke, "blue", "ada", "in-blue")
	managerKeySelf    = teamKey(gatewayv1.KeyTypeManageAPIKeys, "", "ada", "mk-1")
	managerKeyOther   = teamKey(gatewayv1.KeyTypeManageAPIKeys, "", "ada", "mk-2")
	managerKeyByTia   = teamKey(gatewayv1.KeyTypeManageAPIKeys, "", "tia", "mk-tia")
)

// golden is the permission table: key type × action × scope × role. docs/rest-api.md renders it.
var golden = []row{
	// PERSONAL keys act with their owner's current roles.
	{rulePersonal, admin, ActionInvoke, model("m1", "red", "prod"), allowed},
	{rulePersonal, admin, ActionManageModels, model("ws", "", "prod"), allowed},
	{rulePersonal, admin, ActionManageGateway, Resource{}, allowed},
	{rulePersonal, admin, ActionExportMetrics, team(""), allowed},
	{rulePersonal, admin, ActionSandbox, team("blue"), allowed},
	{rulePersonal, admin, ActionListTeams, team("blue"), allowed},
	{rulePersonal, admin, ActionListModels, model("m3", "blue", ""), allowed},
	{ruleRoles, member, ActionInvoke, model("m1", "red", "prod"), allowed},
	{ruleInvisible, member, ActionInvoke, model("m3", "blue", "prod"), notFound},
	{ruleRoles, teamAdmin, ActionInvoke, model("m3", "blue", "prod"), allowed},
	{ruleRoles, member, ActionInvoke, model("ws", "", "prod"), allowed},
	{ruleRoles, member, ActionManageModels, model("m1", "red", "prod"), allowed},
	{ruleInvisible, member, ActionManageModels, model("m3", "blue", "prod"), notFound},
	{ruleRoles, member, ActionManageModels, model("ws", "", "prod"), forbidden},
	{ruleRoles, member, ActionManageGateway, Resource{}, forbidden},
	{ruleRoles, member, ActionExportMetrics, team(""), forbidden},
	{ruleRoles, member, ActionSandbox, team("red"), allowed},
	{ruleRoles, member, ActionSandbox, team("blue"), forbidden},
	{ruleRoles, member, ActionSandbox, team(""), forbidden},
	{ruleRoles, member, ActionListTeams, Resource{}, allowed},
	{ruleRoles, member, ActionListTeams, team("red"), allowed},
	{ruleInvisible, member, ActionListTeams, team("blue"), notFound},
	{ruleRoles, member, ActionListModels, Resource{}, allowed},
	{ruleRoles, member, ActionListModels, model("ws", "", ""), allowed},
	{ruleInvisible, member, ActionListModels, model("m3", "blue", ""), notFound},
	{ruleDeprovisioned, departed, ActionInvoke, model("m1", "red", "prod"), forbidden},
	{ruleDeprovisioned, departed, ActionKeySee, personalKey("gus"), forbidden},

	// WORKSPACE_MANAGE_ALL: deploy, call endpoints, manage resources, within its team.
	{ruleManageAll, manageAllRed, ActionInvoke, model("m1", "red", "prod"), allowed},
	{ruleManageAll, manageAllRed, ActionManageModels, model("m1", "red", "dev"), allowed},
	{ruleManageAll, manageAllRed, ActionManageGateway, Resource{}, allowed},
	{ruleManageAll, manageAllRed, ActionExportMetrics, team(""), allowed},
	{ruleManageAll, manageAllRed, ActionSandbox, team("red"), allowed},
	{ruleManageAll, manageAllRed, ActionListTeams, team("red"), allowed},
	{ruleManageAll, manageAllRed, ActionListModels, model("m1", "red", ""), allowed},
	{ruleManageAll, manageAllRed, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "red"), forbidden},
	{ruleManageAll, manageAllRed, ActionKeySee, invokeKeyRedByTia, forbidden},
	{ruleManageAllBound, manageAllRed, ActionManageModels, model("m3", "blue", "prod"), notFound},
	{ruleManageAllBound, manageAllRed, ActionManageModels, model("ws", "", "prod"), notFound},
	{ruleManageAllBound, manageAllRed, ActionExportMetrics, team("blue"), forbidden},
	{ruleManageAllBound, manageAllRed, ActionSandbox, team("blue"), forbidden},
	{ruleManageAllBound, manageAllRed, ActionListTeams, team("blue"), notFound},
	{ruleManageAllBound, manageAllRed, ActionListModels, model("ws", "", ""), notFound},
	{ruleWorkspaceKey, manageAllWS, ActionManageModels, model("ws", "", "prod"), allowed},
	{ruleWorkspaceKey, manageAllWS, ActionSandbox, team("blue"), allowed},
	{ruleWorkspaceKey, manageAllWS, ActionListModels, model("ws", "", ""), allowed},

	// WORKSPACE_INVOKE: call model endpoints only.
	{ruleInvoke, invokeRed, ActionInvoke, model("m1", "red", "prod"), allowed},
	{ruleInvoke, invokeRed, ActionManageModels, model("m1", "red", "prod"), forbidden},
	{ruleInvoke, invokeRed, ActionManageGateway, Resource{}, forbidden},
	{ruleInvoke, invokeRed, ActionExportMetrics, team(""), forbidden},
	{ruleInvoke, invokeRed, ActionListTeams, Resource{}, forbidden},
	{ruleInvoke, invokeRed, ActionListModels, Resource{}, forbidden},
	{ruleInvoke, invokeRed, ActionSandbox, team("red"), forbidden},
	{ruleInvoke, invokeRed, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "red"), forbidden},
	{ruleInvoke, invokeRed, ActionKeyRevoke, invokeKeyRedByTia, forbidden},
	{ruleWorkspaceKey, invokeWS, ActionInvoke, model("ws", "", "prod"), allowed},
	{ruleWorkspaceKey, invokeWS, ActionInvoke, model("m3", "blue", "dev"), allowed},
	{ruleInvokers, invokeRed, ActionInvoke, model("m2", "red", "dev"), allowed},

	// WORKSPACE_EXPORT_METRICS: export metrics only.
	{ruleMetrics, metricsRed, ActionExportMetrics, team(""), allowed},
	{ruleMetrics, metricsRed, ActionExportMetrics, team("red"), allowed},
	{ruleMetrics, metricsRed, ActionExportMetrics, team("blue"), forbidden},
	{ruleMetrics, metricsRed, ActionInvoke, model("m1", "red", "prod"), forbidden},
	{ruleMetrics, metricsRed, ActionManageModels, model("m1", "red", "prod"), forbidden},
	{ruleMetrics, metricsRed, ActionManageGateway, Resource{}, forbidden},
	{ruleMetrics, metricsRed, ActionListModels, Resource{}, forbidden},
	{ruleMetrics, metricsRed, ActionSandbox, team("red"), forbidden},
	{ruleMetrics, metricsRed, ActionKeySee, invokeKeyRedByTia, forbidden},

	// WORKSPACE_MANAGE_API_KEYS: manage team and personal keys across the organization, and nothing else.
	{ruleKeysList, keyManager, ActionListTeams, Resource{}, allowed},
	{ruleKeysList, keyManager, ActionListTeams, team("blue"), allowed},
	{ruleKeysList, keyManager, ActionListModels, Resource{}, allowed},
	{ruleKeysList, keyManager, ActionListModels, model("m3", "blue", ""), allowed},
	{ruleKeysCreate, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAll, "red"), allowed},
	{ruleKeysCreate, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "blue"), allowed},
	{ruleKeysCreate, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypeExportMetrics, ""), allowed},
	{ruleKeysSee, keyManager, ActionKeySee, invokeKeyRedByMo, allowed},
	{ruleKeysSee, keyManager, ActionKeySee, personalKey("mo"), allowed},
	{ruleKeysRevoke, keyManager, ActionKeyRevoke, invokeKeyBlue, allowed},
	{ruleKeysRevoke, keyManager, ActionKeyRevoke, personalKey("tia"), allowed},
	{ruleKeysCannot, keyManager, ActionInvoke, model("m1", "red", "prod"), forbidden},
	{ruleKeysCannot, keyManager, ActionManageModels, model("m1", "red", "prod"), forbidden},
	{ruleKeysCannot, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypePersonal, ""), forbidden},
	{ruleKeysCannot, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAPIKeys, ""), forbidden},
	{ruleKeysCannot, keyManager, ActionManageGateway, Resource{}, forbidden},
	{ruleKeysCannot, keyManager, ActionExportMetrics, team(""), forbidden},
	{ruleKeysCannot, keyManager, ActionSandbox, team("red"), forbidden},
	{ruleKeysCannot, keyManager, ActionKeyRename, invokeKeyRedByMo, forbidden},

	// Environment- and model-scoped team keys call only their scope, inside their team.
	{ruleScoped, invokeScoped, ActionInvoke, model("m1", "red", "prod"), allowed},
	{ruleScoped, invokeScoped, ActionInvoke, model("m2", "red", "prod"), forbidden},
	{ruleScoped, invokeScoped, ActionInvoke, model("m1", "red", "dev"), forbidden},
	{ruleScoped, invokeProd, ActionInvoke, model("m2", "red", "prod"), allowed},
	{ruleScoped, invokeProd, ActionInvoke, model("m2", "red", "dev"), forbidden},
	{ruleScoped, manageAllScoped, ActionInvoke, model("m1", "red", "dev"), forbidden},
	{ruleScope, manageAllScoped, ActionManageModels, model("m1", "red", "prod"), allowed},
	{ruleScope, manageAllScoped, ActionManageModels, model("m2", "red", "prod"), forbidden},
	{ruleScope, invokeScoped, ActionInvoke, model("m1", "blue", "prod"), notFound},
	{ruleScope, invokeRed, ActionInvoke, model("ws", "", "prod"), notFound},

	// Management keys are the organization admins'; team admins create their team's keys.
	{ruleMgmtKeys, admin, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAPIKeys, ""), allowed},
	{ruleMgmtKeys, admin, ActionKeyRename, managerKeyOther, allowed},
	{ruleMgmtKeys, admin, ActionKeyRevoke, managerKeyOther, allowed},
	{ruleMgmtKeys, teamAdmin, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAPIKeys, ""), forbidden},
	{ruleMgmtKeys, member, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAPIKeys, ""), forbidden},
	{ruleMgmtKeys, teamAdmin, ActionKeyRevoke, managerKeyByTia, forbidden},
	{ruleMgmtKeys, teamAdmin, ActionKeyRename, managerKeyByTia, forbidden},
	{ruleMgmtKeys, keyManager, ActionKeyRevoke, managerKeySelf, forbidden},
	{ruleMgmtKeys, keyManager, ActionKeyRename, managerKeySelf, forbidden},
	{ruleTeamAdmins, teamAdmin, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "red"), allowed},
	{ruleTeamAdmins, teamAdmin, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAll, "blue"), forbidden},
	{ruleTeamAdmins, teamAdmin, ActionKeyCreate, newKey(gatewayv1.KeyTypeExportMetrics, ""), forbidden},
	{ruleTeamAdmins, member, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "red"), forbidden},
	{rulePersonal, member, ActionKeyCreate, newKey(gatewayv1.KeyTypePersonal, ""), allowed},
	{rulePersonal, admin, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "blue"), allowed},
	{ruleTypes, admin, ActionKeyCreate, newKey("ROOT", ""), forbidden},
	{ruleTypes, unknownType, ActionInvoke, model("m1", "red", "prod"), forbidden},

	// Visibility: a key the caller may not see is 404 for see, rename and revoke.
	{ruleAdmins, admin, ActionKeySee, invokeKeyBlue, allowed},
	{ruleAdmins, admin, ActionKeySee, personalKey("mo"), allowed},
	{ruleAdmins, admin, ActionKeyRevoke, personalKey("mo"), allowed},
	{ruleAdmins, admin, ActionKeyRevoke, invokeKeyRedByMo, allowed},
	{ruleAdminsRename, admin, ActionKeyRename, personalKey("mo"), forbidden},
	{ruleAdminsRename, admin, ActionKeyRename, personalKey("ada"), allowed},
	{ruleAdminsRename, admin, ActionKeyRename, invokeKeyRedByMo, allowed},
	{ruleTeamAdminsSee, teamAdmin, ActionKeySee, invokeKeyRedByMo, allowed},
	{ruleTeamAdminsSee, teamAdmin, ActionKeyRevoke, invokeKeyRedByMo, allowed},
	{ruleTeamAdminsSee, teamAdmin, ActionKeyRename, invokeKeyRedByMo, allowed},
	{ruleTeamAdminsSee, teamAdmin, ActionKeySee, invokeKeyBlue, notFound},
	{ruleTeamAdminsSee, teamAdmin, ActionKeySee, personalKey("mo"), notFound},
	{ruleList, teamAdmin, ActionKeySee, invokeKeyRedByKey, allowed},
	{ruleList, member, ActionKeySee, Resource{}, allowed},
	{ruleList, keyManager, ActionKeySee, Resource{}, allowed},
	{ruleList, manageAllRed, ActionKeySee, Resource{}, forbidden},
	{ruleOthers, member, ActionKeySee, personalKey("mo"), allowed},
	{ruleOthers, member, ActionKeyRename, personalKey("mo"), allowed},
	{ruleOthers, member, ActionKeyRevoke, personalKey("mo"), allowed},
	{ruleOthers, member, ActionKeySee, invokeKeyRedByMo, allowed},
	{ruleOthers, member, ActionKeyRevoke, invokeKeyRedByMo, allowed},
	{ruleOthers, member, ActionKeySee, invokeKeyRedByTia, notFound},
	{ruleOthers, member, ActionKeySee, personalKey("tia"), notFound},
	{ruleOthers, member, ActionKeyRevoke, personalKey("tia"), notFound},
	{ruleOthers, member, ActionKeyRename, personalKey("tia"), notFound},
	{ruleMgmtSee, keyManager, ActionKeySee, managerKeySelf, allowed},
	{ruleMgmtSee, keyManager, ActionKeySee, managerKeyOther, notFound},
	{ruleMgmtSee, keyManager, ActionKeyRevoke, managerKeyOther, notFound},
}

// TestDecide checks every row of the golden table.
func TestDecide(t *testing.T) {
	for _, tc := range golden {
		d := Decide(tc.principal, tc.action, tc.resource)
		if got := answerOf(d); got != tc.want {
			t.Errorf("%s\n  %s\n  got %s (%q), want %s", tc.sentence, describeRow(tc), got, d.Reason, tc.want)
		}
		if d.Reason == "" {
			t.Errorf("%s: the decision names no rule", describeRow(tc))
		}
		if d.Allowed && d.Hidden {
			t.Errorf("%s: a decision is allowed and hidden at once", describeRow(tc))
		}
	}
}

// TestGoldenRowsAreDistinct fails when two rows ask the same question, or read the same in the docs.
func TestGoldenRowsAreDistinct(t *testing.T) {
	seen := map[string]int{}
	for i, a := range golden {
		for j, b := range golden[:i] {
			if reflect.DeepEqual(a.principal, b.principal) && a.action == b.action && a.resource == b.resource {
				t.Errorf("rows %d and %d ask the same question: %s", j, i, describeRow(a))
			}
		}
		line := describeRow(a)
		if j, dup := seen[line]; dup {
			t.Errorf("rows %d and %d read the same in the docs: %s", j, i, line)
		}
		seen[line] = i
	}
}

// TestGoldenCoversEveryInput fails when an action, a key type or a cited sentence has no row, or a row cites a
// sentence that is not in the list.
func TestGoldenCoversEveryInput(t *testing.T) {
	actions, types, cited := map[Action]bool{}, map[gatewayv1.WorkspaceKeyType]bool{}, map[string]bool{}
	for _, tc := range golden {
		actions[tc.action], types[tc.principal.KeyType], cited[tc.sentence] = true, true, true
	}
	for a := ActionInvoke; a <= ActionSandbox; a++ {
		if !actions[a] {
			t.Errorf("no row for action %s", a)
		}
	}
	for _, k := range gatewayv1.KeyTypes {
		if !types[k] {
			t.Errorf("no row for key type %s", k)
		}
	}
	for _, s := range sentences {
		if !cited[s] {
			t.Errorf("no row checks %q", s)
		}
		delete(cited, s)
	}
	for s := range cited {
		t.Errorf("a row cites %q, which is not in sentences", s)
	}
}

// TestGoldenReachesEveryRule fails when a rule of the package (a reason* constant) decides no row: either the rule
// is unreachable or the table misses a case.
func TestGoldenReachesEveryRule(t *testing.T) {
	reached := map[string]bool{}
	for _, tc := range golden {
		reached[Decide(tc.principal, tc.action, tc.resource).Reason] = true
	}
	for name, text := range reasonConstants(t) {
		if !reached[text] {
			t.Errorf("no row is decided by %s (%q)", name, text)
		}
	}
}

// TestDecideRefusesUnknownAction checks that an action outside the enum is refused, not allowed by default.
func TestDecideRefusesUnknownAction(t *testing.T) {
	for _, a := range []Action{0, ActionSandbox + 1} {
		if d := Decide(admin, a, Resource{}); d.Allowed || d.Reason != reasonUnknown {
			t.Errorf("Decide(admin, %d) = %+v, want a refusal for an unknown action", a, d)
		}
		if a.String() != "unknown action" {
			t.Errorf("Action(%d).String() = %q", a, a.String())
		}
	}
}

// reasonConstants reads the package's non-test sources and returns every reason* constant by name.
func reasonConstants(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("failed to parse %s: %v", name, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, id := range spec.Names {
				if i >= len(spec.Values) {
					break
				}
				if lit, ok := spec.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(id.Name, "reason") {
					text, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatalf("%s: %v", id.Name, err)
					}
					out[id.Name] = text
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatal("found no reason constants")
	}
	return out
}

// TestRulesAreTheDocs: each rule a row cites is, word for word, the numbered rule of docs/rest-api.md "Key types and
// permission rules", so the page and the golden table cannot drift apart.
func TestRulesAreTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/rest-api.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sentences {
		n, text, ok := strings.Cut(strings.TrimPrefix(s, "Rule "), ": ")
		if !ok {
			t.Errorf("%q is not of the form \"Rule N: text\"", s)
			continue
		}
		if !strings.Contains(string(doc), "\n"+n+". "+text+"\n") {
			t.Errorf("docs/rest-api.md has no rule %s. %s", n, text)
		}
	}
}
