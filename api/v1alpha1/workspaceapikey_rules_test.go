package v1alpha1

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

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

// TestValidateKeyScope: every id of a key's scope lists is checked, the refusal naming the item and the rule.
func TestValidateKeyScope(t *testing.T) {
	for _, tc := range []struct {
		models, envs []string
		want         []string // "field: detail" of each refusal
	}{
		{models: []string{"demo", "demo/echo", "gpt-4o", "org/Model-1.5:latest"}, envs: []string{"production", "staging-2"}},
		{models: []string{""}, want: []string{"model_ids[0]: " + ModelRefRule}},
		{models: []string{"ok", "../x", "-a"}, want: []string{"model_ids[1]: " + ModelRefRule, "model_ids[2]: " + ModelRefRule}},
		{models: []string{strings.Repeat("m", ModelRefMaxLength+1)}, want: []string{"model_ids[0]: may not be more than 128 bytes"}},
		{envs: []string{"../x"}, want: []string{"environments[0]: " + EnvironmentNameRule}},
		{envs: []string{"production", "", "Staging", "a-"}, want: []string{"environments[1]: " + EnvironmentNameRule,
			"environments[2]: " + EnvironmentNameRule, "environments[3]: " + EnvironmentNameRule}},
		{envs: []string{strings.Repeat("e", 64)}, want: []string{"environments[0]: may not be more than 63 bytes"}},
	} {
		errs := ValidateKeyScope(tc.models, tc.envs, field.NewPath("model_ids"), field.NewPath("environments"))
		var got []string
		for _, e := range errs {
			got = append(got, e.Field+": "+e.Detail)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ValidateKeyScope(%q, %q) = %q, want %q", tc.models, tc.envs, got, tc.want)
		}
	}
}

// TestKeyScopeRulesMatchTheCRD: the CRD's CEL rules on spec.models and spec.environments are the patterns and
// messages ValidateKeyScope uses, so kubectl and REST cannot drift apart.
func TestKeyScopeRulesMatchTheCRD(t *testing.T) {
	spec := crdSpec(t, "workspaceapikeys")
	for prop, want := range map[string][3]string{
		"models":       {ModelRefPattern, ModelRefRule, "128"},
		"environments": {EnvironmentNamePattern, EnvironmentNameRule, "63"},
	} {
		items := spec.Properties[prop].Items.Schema
		if len(items.XValidations) != 1 {
			t.Fatalf("spec.%s items have %d CEL rules, want 1", prop, len(items.XValidations))
		}
		v := items.XValidations[0]
		if v.Rule != "self.matches('"+want[0]+"')" || v.Message != want[1] {
			t.Errorf("spec.%s items: rule %q message %q, want the pattern %q and message %q", prop, v.Rule, v.Message, want[0], want[1])
		}
		if items.MaxLength == nil || strconv.FormatInt(*items.MaxLength, 10) != want[2] {
			t.Errorf("spec.%s items: maxLength %v, want %s", prop, items.MaxLength, want[2])
		}
	}
}

// crdSpec reads the spec schema of the generated CRD of a resource (its plural).
func crdSpec(t *testing.T, plural string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	b, err := os.ReadFile("../../config/crd/bases/gateway.modelgate.io_" + plural + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
}

// enumOf is the values of a schema's enum.
func enumOf(t *testing.T, s apiextensionsv1.JSONSchemaProps) []string {
	t.Helper()
	var out []string
	for _, v := range s.Enum {
		var e string
		if err := json.Unmarshal(v.Raw, &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// TestRuleTablesMatchTheCRDEnums: the key types of KeyTypes and KeyTypeRules, and the limit types and units, are
// the CRD's enums (the CEL rules per type and per kind are checked against the API server in test/celvalidation).
func TestRuleTablesMatchTheCRDEnums(t *testing.T) {
	var keyTypes []string
	for _, kt := range KeyTypes {
		keyTypes = append(keyTypes, string(kt))
		if _, ok := KeyTypeRules[kt]; !ok {
			t.Errorf("KeyTypeRules has no rule for %s", kt)
		}
	}
	if len(KeyTypeRules) != len(KeyTypes) {
		t.Errorf("KeyTypeRules has %d rules for %d key types", len(KeyTypeRules), len(KeyTypes))
	}
	if got := enumOf(t, crdSpec(t, "workspaceapikeys").Properties["type"]); !slices.Equal(got, keyTypes) {
		t.Errorf("WorkspaceAPIKey spec.type enum %q, want KeyTypes %q", got, keyTypes)
	}
	var limitTypes, limitUnits, kindUnits []string
	for _, lt := range LimitTypes {
		limitTypes = append(limitTypes, string(lt))
	}
	for _, u := range LimitUnits {
		limitUnits = append(limitUnits, string(u))
	}
	models := crdSpec(t, "groups").Properties["models"].Items.Schema
	for _, k := range LimitKinds {
		limit := models.Properties[k.Field].Items.Schema
		if got := enumOf(t, limit.Properties["type"]); !slices.Equal(got, limitTypes) {
			t.Errorf("Group %s type enum %q, want LimitTypes %q", k.Field, got, limitTypes)
		}
		if got := enumOf(t, limit.Properties["unit"]); !slices.Equal(got, limitUnits) {
			t.Errorf("Group %s unit enum %q, want LimitUnits %q", k.Field, got, limitUnits)
		}
		for _, u := range k.Units {
			kindUnits = append(kindUnits, string(u))
		}
	}
	slices.Sort(kindUnits)
	if want := slices.Sorted(slices.Values(limitUnits)); !slices.Equal(kindUnits, want) {
		t.Errorf("the limit kinds take units %q, want each of LimitUnits %q once", kindUnits, want)
	}
}
