package authz

import (
	"go/ast"
	"go/parser"
	"go/token"
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
	s4Types          = "Rule 1: A workspace key has one of five types: PERSONAL, WORKSPACE_MANAGE_ALL, WORKSPACE_INVOKE, WORKSPACE_EXPORT_METRICS, WORKSPACE_MANAGE_API_KEYS."
	s4Personal       = "Rule 2: A PERSONAL key belongs to one user and may do what that user may do."
	s4Deprovisioned  = "Rule 4: A PERSONAL key whose owner has left the workspace may do nothing; the manager then deletes it."
	s4ManageAll      = "Rule 5: A WORKSPACE_MANAGE_ALL key deploys, calls and manages models and the other resources of the workspace."
	s4ManageAllBound = "Rule 6: A WORKSPACE_MANAGE_ALL key acts for one team, or for the whole workspace."
	s4Invoke         = "Rule 7: A WORKSPACE_INVOKE key calls models and does nothing else."
	s4Metrics        = "Rule 8: A WORKSPACE_EXPORT_METRICS key reads metrics and does nothing else."
	s4KeysList       = "Rule 9: A WORKSPACE_MANAGE_API_KEYS key lists teams and models, to find the ids that scope keys."
	s4KeysCreate     = "Rule 10: A WORKSPACE_MANAGE_API_KEYS key creates team keys of every type, for any team."
	s4KeysSee        = "Rule 11: A WORKSPACE_MANAGE_API_KEYS key sees the team keys and the members' PERSONAL keys."
	s4KeysRevoke     = "Rule 12: A WORKSPACE_MANAGE_API_KEYS key revokes team keys and PERSONAL keys."
	s4KeysCannot     = "Rule 13: A WORKSPACE_MANAGE_API_KEYS key neither calls nor manages models, and creates neither PERSONAL keys nor other key-management keys."
	s6               = "Rule 14: A WORKSPACE_MANAGE_ALL or WORKSPACE_INVOKE key may be limited to some environments, or to some models in some environments, and then calls only those."
	s7Management     = "Rule 15: Only organization admins create, rename or revoke key-management keys."
	s7TeamAdmins     = "Rule 16: A team admin creates keys for their own teams."
	s8Admins         = "Rule 17: Organization admins see every team key and every member's PERSONAL key, and may revoke any of them."
	s8AdminsRename   = "Rule 18: Organization admins may not rename another member's PERSONAL key."
	s8TeamAdmins     = "Rule 19: Team admins also see every key of their teams."
	s8Others         = "Rule 20: Everyone else sees their own PERSONAL keys and the team keys they created."
	s8List           = "Rule 21: The key list shows each caller exactly the keys these rules let it see."
	s8Management     = "Rule 22: Key-management keys see and revoke team keys and PERSONAL keys across the workspace."
	dRoles           = "Rule 3: A PERSONAL key acts with the roles its owner holds when the call is made."
	dScope           = "Rule 23: A key's effective scope is its team's intersected with its own model and environment scope; an empty scope means all."
	dInvisible       = "Rule 24: Whatever the caller may not learn of (a model, team or key it does not act for) is answered 404, not 403."
	dWorkspaceKey    = "Rule 25: A team key with no team acts for every team of its workspace."
	dInvokers        = "Rule 26: PERSONAL, WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys call the model routes."
)

var sentences = []string{
	s4Types, s4Personal, s4Deprovisioned, s4ManageAll, s4ManageAllBound, s4Invoke, s4Metrics, s4KeysList,
	s4KeysCreate, s4KeysSee, s4KeysRevoke, s4KeysCannot, s6, s7Management, s7TeamAdmins, s8Admins, s8AdminsRename,
	s8TeamAdmins, s8Others, s8List, s8Management, dRoles, dScope, dInvisible, dWorkspaceKey, dInvokers,
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
	{s4Personal, admin, ActionInvoke, model("m1", "red", "prod"), allowed},
	{s4Personal, admin, ActionManageModels, model("ws", "", "prod"), allowed},
	{s4Personal, admin, ActionManageGateway, Resource{}, allowed},
	{s4Personal, admin, ActionExportMetrics, team(""), allowed},
	{s4Personal, admin, ActionSandbox, team("blue"), allowed},
	{s4Personal, admin, ActionListTeams, team("blue"), allowed},
	{s4Personal, admin, ActionListModels, model("m3", "blue", ""), allowed},
	{dRoles, member, ActionInvoke, model("m1", "red", "prod"), allowed},
	{dInvisible, member, ActionInvoke, model("m3", "blue", "prod"), notFound},
	{dRoles, teamAdmin, ActionInvoke, model("m3", "blue", "prod"), allowed},
	{dRoles, member, ActionInvoke, model("ws", "", "prod"), allowed},
	{dRoles, member, ActionManageModels, model("m1", "red", "prod"), allowed},
	{dInvisible, member, ActionManageModels, model("m3", "blue", "prod"), notFound},
	{dRoles, member, ActionManageModels, model("ws", "", "prod"), forbidden},
	{dRoles, member, ActionManageGateway, Resource{}, forbidden},
	{dRoles, member, ActionExportMetrics, team(""), forbidden},
	{dRoles, member, ActionSandbox, team("red"), allowed},
	{dRoles, member, ActionSandbox, team("blue"), forbidden},
	{dRoles, member, ActionSandbox, team(""), forbidden},
	{dRoles, member, ActionListTeams, Resource{}, allowed},
	{dRoles, member, ActionListTeams, team("red"), allowed},
	{dInvisible, member, ActionListTeams, team("blue"), notFound},
	{dRoles, member, ActionListModels, Resource{}, allowed},
	{dRoles, member, ActionListModels, model("ws", "", ""), allowed},
	{dInvisible, member, ActionListModels, model("m3", "blue", ""), notFound},
	{s4Deprovisioned, departed, ActionInvoke, model("m1", "red", "prod"), forbidden},
	{s4Deprovisioned, departed, ActionKeySee, personalKey("gus"), forbidden},

	// WORKSPACE_MANAGE_ALL: deploy, call endpoints, manage resources, within its team.
	{s4ManageAll, manageAllRed, ActionInvoke, model("m1", "red", "prod"), allowed},
	{s4ManageAll, manageAllRed, ActionManageModels, model("m1", "red", "dev"), allowed},
	{s4ManageAll, manageAllRed, ActionManageGateway, Resource{}, allowed},
	{s4ManageAll, manageAllRed, ActionExportMetrics, team(""), allowed},
	{s4ManageAll, manageAllRed, ActionSandbox, team("red"), allowed},
	{s4ManageAll, manageAllRed, ActionListTeams, team("red"), allowed},
	{s4ManageAll, manageAllRed, ActionListModels, model("m1", "red", ""), allowed},
	{s4ManageAll, manageAllRed, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "red"), forbidden},
	{s4ManageAll, manageAllRed, ActionKeySee, invokeKeyRedByTia, forbidden},
	{s4ManageAllBound, manageAllRed, ActionManageModels, model("m3", "blue", "prod"), notFound},
	{s4ManageAllBound, manageAllRed, ActionManageModels, model("ws", "", "prod"), notFound},
	{s4ManageAllBound, manageAllRed, ActionExportMetrics, team("blue"), forbidden},
	{s4ManageAllBound, manageAllRed, ActionSandbox, team("blue"), forbidden},
	{s4ManageAllBound, manageAllRed, ActionListTeams, team("blue"), notFound},
	{s4ManageAllBound, manageAllRed, ActionListModels, model("ws", "", ""), notFound},
	{dWorkspaceKey, manageAllWS, ActionManageModels, model("ws", "", "prod"), allowed},
	{dWorkspaceKey, manageAllWS, ActionSandbox, team("blue"), allowed},
	{dWorkspaceKey, manageAllWS, ActionListModels, model("ws", "", ""), allowed},

	// WORKSPACE_INVOKE: call model endpoints only.
	{s4Invoke, invokeRed, ActionInvoke, model("m1", "red", "prod"), allowed},
	{s4Invoke, invokeRed, ActionManageModels, model("m1", "red", "prod"), forbidden},
	{s4Invoke, invokeRed, ActionManageGateway, Resource{}, forbidden},
	{s4Invoke, invokeRed, ActionExportMetrics, team(""), forbidden},
	{s4Invoke, invokeRed, ActionListTeams, Resource{}, forbidden},
	{s4Invoke, invokeRed, ActionListModels, Resource{}, forbidden},
	{s4Invoke, invokeRed, ActionSandbox, team("red"), forbidden},
	{s4Invoke, invokeRed, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "red"), forbidden},
	{s4Invoke, invokeRed, ActionKeyRevoke, invokeKeyRedByTia, forbidden},
	{dWorkspaceKey, invokeWS, ActionInvoke, model("ws", "", "prod"), allowed},
	{dWorkspaceKey, invokeWS, ActionInvoke, model("m3", "blue", "dev"), allowed},
	{dInvokers, invokeRed, ActionInvoke, model("m2", "red", "dev"), allowed},

	// WORKSPACE_EXPORT_METRICS: export metrics only.
	{s4Metrics, metricsRed, ActionExportMetrics, team(""), allowed},
	{s4Metrics, metricsRed, ActionExportMetrics, team("red"), allowed},
	{s4Metrics, metricsRed, ActionExportMetrics, team("blue"), forbidden},
	{s4Metrics, metricsRed, ActionInvoke, model("m1", "red", "prod"), forbidden},
	{s4Metrics, metricsRed, ActionManageModels, model("m1", "red", "prod"), forbidden},
	{s4Metrics, metricsRed, ActionManageGateway, Resource{}, forbidden},
	{s4Metrics, metricsRed, ActionListModels, Resource{}, forbidden},
	{s4Metrics, metricsRed, ActionSandbox, team("red"), forbidden},
	{s4Metrics, metricsRed, ActionKeySee, invokeKeyRedByTia, forbidden},

	// WORKSPACE_MANAGE_API_KEYS: manage team and personal keys across the organization, and nothing else.
	{s4KeysList, keyManager, ActionListTeams, Resource{}, allowed},
	{s4KeysList, keyManager, ActionListTeams, team("blue"), allowed},
	{s4KeysList, keyManager, ActionListModels, Resource{}, allowed},
	{s4KeysList, keyManager, ActionListModels, model("m3", "blue", ""), allowed},
	{s4KeysCreate, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAll, "red"), allowed},
	{s4KeysCreate, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "blue"), allowed},
	{s4KeysCreate, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypeExportMetrics, ""), allowed},
	{s4KeysSee, keyManager, ActionKeySee, invokeKeyRedByMo, allowed},
	{s4KeysSee, keyManager, ActionKeySee, personalKey("mo"), allowed},
	{s4KeysRevoke, keyManager, ActionKeyRevoke, invokeKeyBlue, allowed},
	{s4KeysRevoke, keyManager, ActionKeyRevoke, personalKey("tia"), allowed},
	{s4KeysCannot, keyManager, ActionInvoke, model("m1", "red", "prod"), forbidden},
	{s4KeysCannot, keyManager, ActionManageModels, model("m1", "red", "prod"), forbidden},
	{s4KeysCannot, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypePersonal, ""), forbidden},
	{s4KeysCannot, keyManager, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAPIKeys, ""), forbidden},
	{s4KeysCannot, keyManager, ActionManageGateway, Resource{}, forbidden},
	{s4KeysCannot, keyManager, ActionExportMetrics, team(""), forbidden},
	{s4KeysCannot, keyManager, ActionSandbox, team("red"), forbidden},
	{s4KeysCannot, keyManager, ActionKeyRename, invokeKeyRedByMo, forbidden},

	// Environment- and model-scoped team keys call only their scope, inside their team.
	{s6, invokeScoped, ActionInvoke, model("m1", "red", "prod"), allowed},
	{s6, invokeScoped, ActionInvoke, model("m2", "red", "prod"), forbidden},
	{s6, invokeScoped, ActionInvoke, model("m1", "red", "dev"), forbidden},
	{s6, invokeProd, ActionInvoke, model("m2", "red", "prod"), allowed},
	{s6, invokeProd, ActionInvoke, model("m2", "red", "dev"), forbidden},
	{s6, manageAllScoped, ActionInvoke, model("m1", "red", "dev"), forbidden},
	{dScope, manageAllScoped, ActionManageModels, model("m1", "red", "prod"), allowed},
	{dScope, manageAllScoped, ActionManageModels, model("m2", "red", "prod"), forbidden},
	{dScope, invokeScoped, ActionInvoke, model("m1", "blue", "prod"), notFound},
	{dScope, invokeRed, ActionInvoke, model("ws", "", "prod"), notFound},

	// Management keys are the organization admins'; team admins create their team's keys.
	{s7Management, admin, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAPIKeys, ""), allowed},
	{s7Management, admin, ActionKeyRename, managerKeyOther, allowed},
	{s7Management, admin, ActionKeyRevoke, managerKeyOther, allowed},
	{s7Management, teamAdmin, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAPIKeys, ""), forbidden},
	{s7Management, member, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAPIKeys, ""), forbidden},
	{s7Management, teamAdmin, ActionKeyRevoke, managerKeyByTia, forbidden},
	{s7Management, teamAdmin, ActionKeyRename, managerKeyByTia, forbidden},
	{s7Management, keyManager, ActionKeyRevoke, managerKeySelf, forbidden},
	{s7Management, keyManager, ActionKeyRename, managerKeySelf, forbidden},
	{s7TeamAdmins, teamAdmin, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "red"), allowed},
	{s7TeamAdmins, teamAdmin, ActionKeyCreate, newKey(gatewayv1.KeyTypeManageAll, "blue"), forbidden},
	{s7TeamAdmins, teamAdmin, ActionKeyCreate, newKey(gatewayv1.KeyTypeExportMetrics, ""), forbidden},
	{s7TeamAdmins, member, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "red"), forbidden},
	{s4Personal, member, ActionKeyCreate, newKey(gatewayv1.KeyTypePersonal, ""), allowed},
	{s4Personal, admin, ActionKeyCreate, newKey(gatewayv1.KeyTypeInvoke, "blue"), allowed},
	{s4Types, admin, ActionKeyCreate, newKey("ROOT", ""), forbidden},
	{s4Types, unknownType, ActionInvoke, model("m1", "red", "prod"), forbidden},

	// Visibility: a key the caller may not see is 404 for see, rename and revoke.
	{s8Admins, admin, ActionKeySee, invokeKeyBlue, allowed},
	{s8Admins, admin, ActionKeySee, personalKey("mo"), allowed},
	{s8Admins, admin, ActionKeyRevoke, personalKey("mo"), allowed},
	{s8Admins, admin, ActionKeyRevoke, invokeKeyRedByMo, allowed},
	{s8AdminsRename, admin, ActionKeyRename, personalKey("mo"), forbidden},
	{s8AdminsRename, admin, ActionKeyRename, personalKey("ada"), allowed},
	{s8AdminsRename, admin, ActionKeyRename, invokeKeyRedByMo, allowed},
	{s8TeamAdmins, teamAdmin, ActionKeySee, invokeKeyRedByMo, allowed},
	{s8TeamAdmins, teamAdmin, ActionKeyRevoke, invokeKeyRedByMo, allowed},
	{s8TeamAdmins, teamAdmin, ActionKeyRename, invokeKeyRedByMo, allowed},
	{s8TeamAdmins, teamAdmin, ActionKeySee, invokeKeyBlue, notFound},
	{s8TeamAdmins, teamAdmin, ActionKeySee, personalKey("mo"), notFound},
	{s8List, teamAdmin, ActionKeySee, invokeKeyRedByKey, allowed},
	{s8List, member, ActionKeySee, Resource{}, allowed},
	{s8List, keyManager, ActionKeySee, Resource{}, allowed},
	{s8List, manageAllRed, ActionKeySee, Resource{}, forbidden},
	{s8Others, member, ActionKeySee, personalKey("mo"), allowed},
	{s8Others, member, ActionKeyRename, personalKey("mo"), allowed},
	{s8Others, member, ActionKeyRevoke, personalKey("mo"), allowed},
	{s8Others, member, ActionKeySee, invokeKeyRedByMo, allowed},
	{s8Others, member, ActionKeyRevoke, invokeKeyRedByMo, allowed},
	{s8Others, member, ActionKeySee, invokeKeyRedByTia, notFound},
	{s8Others, member, ActionKeySee, personalKey("tia"), notFound},
	{s8Others, member, ActionKeyRevoke, personalKey("tia"), notFound},
	{s8Others, member, ActionKeyRename, personalKey("tia"), notFound},
	{s8Management, keyManager, ActionKeySee, managerKeySelf, allowed},
	{s8Management, keyManager, ActionKeySee, managerKeyOther, notFound},
	{s8Management, keyManager, ActionKeyRevoke, managerKeyOther, notFound},
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
