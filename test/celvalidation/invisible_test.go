package celvalidation

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// invisibleRule is the message of the rule every name and external id carries beside the control-character rule
// (docs/rest-api.md "Errors"): text a person reads must show what it holds.
const invisibleRule = "must not contain invisible characters"

// TestInvisibleCharactersRefused writes each name and external id with each kind of invisible character, and
// with visible non-ASCII text, which stays accepted.
func TestInvisibleCharactersRefused(t *testing.T) {
	fields := []struct{ name, object, path string }{
		{"group externalEntityID", "kind: Group\nspec: {externalEntityID: \"%s\", models: [{slug: m}]}", "spec.externalEntityID"},
		{"group displayName", "kind: Group\nspec: {externalEntityID: ok, displayName: \"%s\", models: [{slug: m}]}", "spec.displayName"},
		{"federated key displayName", "kind: APIKey\nspec: {groupID: acme, prefix: mgk_AAAAAAAAAAAA, hash: \"" + strings.Repeat("0", 63) + "1\", displayName: \"%s\"}", "spec.displayName"},
		{"model displayName", "kind: Model\nspec: {displayName: \"%s\", environments: [{name: production}]}", "spec.displayName"},
		{"chain displayName", "kind: Chain\nspec: {displayName: \"%s\", environments: [{name: production}]}", "spec.displayName"},
		{"team displayName", "kind: Team\nspec: {displayName: \"%s\"}", "spec.displayName"},
		{"workspace member userID", "kind: Workspace\nspec: {members: [{userID: \"%s\", role: MEMBER}]}", "spec.members[0].userID"},
		{"workspace member name", "kind: Workspace\nspec: {members: [{userID: u1, name: \"%s\", role: MEMBER}]}", "spec.members[0].name"},
		{"personal key owner userID", "kind: WorkspaceAPIKey\nspec: {type: PERSONAL, displayName: dev, owner: {userID: \"%s\"}}", "spec.owner.userID"},
		{"personal key owner name", "kind: WorkspaceAPIKey\nspec: {type: PERSONAL, displayName: dev, owner: {userID: u1, name: \"%s\"}}", "spec.owner.name"},
		{"key creator userID", "kind: WorkspaceAPIKey\nspec: {type: WORKSPACE_INVOKE, displayName: ci, createdBy: {userID: \"%s\"}}", "spec.createdBy.userID"},
	}
	invisible := []struct{ name, text string }{
		{"right-to-left override", `acme\u202Eexe`},
		{"left-to-right isolate", `acme\u2066x\u2069`},
		{"zero-width space", `ac\u200Bme`},
		{"zero-width joiner", `ac\u200Dme`},
		{"byte order mark", `\uFEFFacme`},
		{"no-break space", `acme\u00A0corp`},
		{"narrow no-break space", `acme\u202Fcorp`},
	}
	ctx := t.Context()
	n := 0
	for _, f := range fields {
		for _, c := range invisible {
			t.Run(f.name+" with a "+c.name+" refused", func(t *testing.T) {
				obj := parse(t, fmt.Sprintf(f.object, c.text))
				n++
				obj.SetName(fmt.Sprintf("inv%d", n))
				obj.SetNamespace(namespace)
				check(t, k8s.Create(ctx, obj), f.path, invisibleRule)
			})
		}
		t.Run(f.name+" with visible non-ASCII text accepted", func(t *testing.T) {
			obj := parse(t, fmt.Sprintf(f.object, `Zürich – 東京 №42`))
			n++
			obj.SetName(fmt.Sprintf("inv%d", n))
			obj.SetNamespace(namespace)
			check(t, k8s.Create(ctx, obj), "", "")
		})
	}
}

// TestEveryTextRuleRefusesInvisibleCharacters: a field of a generated CRD that refuses control characters refuses
// invisible ones too, so a name or external id added later cannot carry one rule without the other.
func TestEveryTextRuleRefusesInvisibleCharacters(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	found := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var crd map[string]any
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		walk(crd, filepath.Base(file), func(at string, rules []any) {
			var control, invisible bool
			for _, r := range rules {
				m, _ := r.(map[string]any)
				msg, _ := m["message"].(string)
				control = control || strings.HasPrefix(msg, "must not contain control characters")
				invisible = invisible || strings.HasPrefix(msg, invisibleRule)
			}
			if control {
				found++
				if !invisible {
					t.Errorf("%s refuses control characters but not invisible ones", at)
				}
			}
		})
	}
	if found == 0 {
		t.Fatal("no field with the control-character rule found: the walk is broken")
	}
}

// walk calls fn with every x-kubernetes-validations list under v, and where it is.
func walk(v any, at string, fn func(at string, rules []any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if k == "x-kubernetes-validations" {
				rules, _ := child.([]any)
				fn(at, rules)
				continue
			}
			walk(child, at+"."+k, fn)
		}
	case []any:
		for i, child := range v {
			walk(child, fmt.Sprintf("%s[%d]", at, i), fn)
		}
	}
}
