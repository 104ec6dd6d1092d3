package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/api/apikey"
	"github.com/modelgate/modelgate/test/stack"
)

// The CLI's exit codes (modelgate --help).
const (
	exitUsage       = 2
	exitInvalid     = 3
	exitAuth        = 4
	exitNotFound    = 5
	exitRateLimited = 6
)

// TestLoginStoresAPrivateConfig: login reads the key from stdin, checks the URL, and writes the user's config
// file with mode 0600; later commands use it with no variable set, and MODELGATE_API_KEY overrides it.
func TestLoginStoresAPrivateConfig(t *testing.T) {
	c := &cli{t: t, stdin: adminKey + "\n"}
	r := c.ok("login", "--url", st.GatewayURL)
	path := filepath.Join(c.config, "modelgate", "config")
	if !strings.Contains(r.stdout, path) {
		t.Errorf("login does not say where it saved: %v", r)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	if !strings.Contains(string(raw), adminKey) || !strings.Contains(string(raw), st.GatewayURL) {
		t.Errorf("config %s holds %s", path, raw)
	}

	c.stdin = ""
	if r := c.ok("models", "list"); !strings.Contains(r.stdout, stack.ModelName) {
		t.Errorf("models list after login: %v", r)
	}
	bogus, _ := apikey.Mint(apikey.Workspace)
	c.env = []string{"MODELGATE_API_KEY=" + bogus}
	c.refused(exitAuth, []string{"HTTP 401 unauthorized"}, "models", "list")

	// A URL that is not a modelgate server, and no login at all.
	other := &cli{t: t, stdin: adminKey + "\n"}
	other.refused(1, []string{"does not answer as a modelgate server"}, "login", "--url", "http://127.0.0.1:1")
	other.refused(exitUsage, []string{"modelgate login"}, "models", "list")
}

// TestHelpAndCompletion: every command answers --help with an example; cobra's completion scripts are there, and
// complete flag values and model ids.
func TestHelpAndCompletion(t *testing.T) {
	c := as(t, "")
	for _, cmd := range [][]string{{}, {"keys", "create"}, {"groups", "list"}, {"group-keys", "create"}, {"endpoints", "apply"}, {"models", "promote"},
		{"predict"}, {"async", "status"}, {"chains", "delete"}, {"images", "push"}, {"login"}, {"completion", "zsh"}} {
		r := c.ok(append(cmd, "--help")...)
		if !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("modelgate %s --help has no example: %s", strings.Join(cmd, " "), r.stdout)
		}
	}
	if r := c.ok("completion", "bash"); !strings.Contains(r.stdout, "__start_modelgate") {
		t.Errorf("bash completion: %.200s", r.stdout)
	}
	// Dynamic completion goes through cobra's __complete: flag values, and model ids from the server.
	if r := c.ok("__complete", "keys", "create", "--type", ""); !strings.Contains(r.stdout, "WORKSPACE_INVOKE") {
		t.Errorf("completion of --type: %s", r.stdout)
	}
	if r := as(t, adminKey).ok("__complete", "models", "get", ""); !strings.Contains(r.stdout, stack.ModelName+"\tDemo sentiment model") {
		t.Errorf("completion of a model id: %s", r.stdout)
	}
	if r := c.ok("--version"); !strings.HasPrefix(r.stdout, "modelgate version ") {
		t.Errorf("--version: %s", r.stdout)
	}
	c.refused(exitUsage, []string{"unknown flag: --bogus"}, "models", "list", "--bogus")
	c.refused(exitUsage, []string{"-o must be table, json or yaml"}, "models", "list", "-o", "xml")
}

// TestWorkspaceKeys: a PERSONAL admin key creates a key (the secret once, on stdout alone), lists, renames and
// revokes it; the new key calls the model until it is revoked. Refusals name the field and the rule.
func TestWorkspaceKeys(t *testing.T) {
	ada := as(t, personalKey)
	r := ada.ok("keys", "create", "--type", "WORKSPACE_INVOKE", "--name", "cli-invoke", "--model", stack.ModelName)
	key := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(key, "mgw_") || strings.Contains(key, "\n") || !strings.Contains(r.stderr, "not shown again") {
		t.Fatalf("create: %v", r)
	}
	prefix := apikey.Prefix(key)

	r = ada.ok("keys", "list")
	if !strings.Contains(r.stdout, "PREFIX") || !strings.Contains(r.stdout, prefix) || !strings.Contains(r.stdout, "cli-invoke") {
		t.Errorf("list: %v", r)
	}
	renamed := ada.json("keys", "rename", prefix, "cli-invoke-2")
	if renamed["name"] != "cli-invoke-2" || renamed["prefix"] != prefix {
		t.Errorf("rename: %v", renamed)
	}
	if r := ada.ok("keys", "list", "-o", "yaml"); !strings.Contains(r.stdout, "name: cli-invoke-2") {
		t.Errorf("list -o yaml after rename: %v", r)
	}

	invoke := &cli{t: t, key: key, stdin: `{"text":"I love it"}`}
	eventually(t, "the new key calling the model", func() (bool, string) {
		r := invoke.run("predict", stack.ModelName)
		return r.code == 0 && strings.Contains(r.stdout, `"label":"positive"`), r.String()
	})
	invoke.refused(exitAuth, []string{"HTTP 403 forbidden", "key_type: WORKSPACE_INVOKE"}, "groups", "list")

	if r := ada.ok("keys", "revoke", prefix); !strings.Contains(r.stdout, "Revoked "+prefix) {
		t.Errorf("revoke: %v", r)
	}
	invoke.refused(exitAuth, []string{"HTTP 401"}, "predict", stack.ModelName)
	ada.refused(exitNotFound, []string{"HTTP 404 not_found"}, "keys", "revoke", prefix)

	// Refusals: the server's field and rule, and the exit code of the status.
	ada.refused(exitInvalid, []string{"HTTP 400", "name: "}, "keys", "create", "--type", "WORKSPACE_INVOKE", "--name", "Not_A_Name")
	ada.refused(exitInvalid, []string{"HTTP 400", "type: "}, "keys", "create", "--type", "ROOT", "--name", "cli-root")
	ada.refused(exitInvalid, []string{"environments: "}, "keys", "create", "--type", "WORKSPACE_EXPORT_METRICS", "--name", "cli-metrics", "--environment", "production")
	as(t, adminKey).refused(exitAuth, []string{"HTTP 403 forbidden"}, "keys", "list")
}

// TestGroupsAndGroupKeys: a group from a YAML body with flags over it, read back, listed by external id, renamed,
// its usage; a federated key minted, listed, read and revoked; the group deleted. Refusals name the field.
func TestGroupsAndGroupKeys(t *testing.T) {
	admin := as(t, adminKey)
	body := filepath.Join(t.TempDir(), "group.yaml")
	os.WriteFile(body, []byte("metadata: {name: placeholder}\nmodels:\n- slug: demo/echo\n  usage_limits: [{type: REQUEST, unit: DAY, threshold: 1000}]\n"), 0o600)

	dry := admin.json("groups", "create", "-f", body, "--name", "cli-acme", "--external-id", "cli-0042", "--dry-run")
	if lookup(dry, "metadata", "name") != "cli-acme" {
		t.Fatalf("dry run: %v", dry)
	}
	if r := admin.ok("groups", "list", "--external-id", "cli-0042"); strings.Contains(r.stdout, "cli-acme") {
		t.Fatalf("the dry run stored the group: %v", r)
	}
	created := admin.json("groups", "create", "-f", body, "--name", "cli-acme", "--external-id", "cli-0042")
	id, _ := created["id"].(string)
	if !strings.HasPrefix(id, "grp-") || lookup(created, "metadata", "external_entity_id") != "cli-0042" {
		t.Fatalf("create: %v", created)
	}
	if r := admin.ok("groups", "get", id); !strings.Contains(r.stdout, "EXTERNAL ID") || !strings.Contains(r.stdout, "cli-0042") || !strings.Contains(r.stdout, "demo/echo") {
		t.Errorf("get: %v", r)
	}
	page := admin.json("groups", "list", "--external-id", "cli-0042")
	if items, _ := page["items"].([]any); len(items) != 1 {
		t.Errorf("list --external-id: %v", page)
	}
	if all := admin.json("groups", "list", "--all", "--limit", "1"); len(all["items"].([]any)) < 1 || lookup(all, "pagination", "has_more") != false {
		t.Errorf("list --all: %v", all)
	}
	if r := admin.ok("groups", "update", id, "--name", "cli-acme-2"); !strings.Contains(r.stdout, "cli-acme-2") {
		t.Errorf("update: %v", r)
	}
	if r := admin.ok("groups", "usage", id); !strings.Contains(r.stdout, "demo/echo") || !strings.Contains(r.stdout, "1000") {
		t.Errorf("usage: %v", r)
	}

	r := admin.ok("group-keys", "create", id, "--name", "alice")
	fed := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(fed, "mgk_") || !strings.Contains(r.stderr, "not shown again") {
		t.Fatalf("group-keys create: %v", r)
	}
	prefix := apikey.Prefix(fed)
	if r := admin.ok("group-keys", "list", id); !strings.Contains(r.stdout, prefix) || !strings.Contains(r.stdout, "alice") {
		t.Errorf("group-keys list: %v", r)
	}
	if got := admin.json("group-keys", "get", id, prefix); got["name"] != "alice" {
		t.Errorf("group-keys get: %v", got)
	}
	if r := admin.ok("group-keys", "delete", id, prefix); !strings.Contains(r.stdout, "Revoked "+prefix) {
		t.Errorf("group-keys delete: %v", r)
	}
	admin.refused(exitNotFound, []string{"HTTP 404"}, "group-keys", "get", id, prefix)

	// Refusals name the API's field.
	admin.refused(exitInvalid, []string{"HTTP 400", "metadata.external_entity_id"}, "groups", "create", "--name", "cli-orphan", "--model", "demo/echo")
	admin.refused(exitInvalid, []string{"HTTP 409 conflict"}, "groups", "create", "--name", "cli-twin", "--external-id", "cli-0042", "--model", "demo/echo")
	admin.refused(exitInvalid, []string{"HTTP 400", "models[0].usage_limits[0].threshold"}, "groups", "update", id, "-f", writeFile(t, "bad.json",
		`{"models":[{"slug":"demo/echo","usage_limits":[{"type":"REQUEST","unit":"DAY","threshold":0}]}]}`))
	admin.refused(exitNotFound, []string{"HTTP 404"}, "groups", "create", "--external-id", "cli-child", "--parent", "grp-0000000000000000", "--model", "demo/echo")

	if r := admin.ok("groups", "delete", id); !strings.Contains(r.stdout, "Deleted group "+id) {
		t.Errorf("delete: %v", r)
	}
	admin.refused(exitNotFound, nil, "groups", "get", id)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// lookup reads a nested field of decoded JSON.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// TestPredict: a body from a file and from stdin, JSON answers as they came or indented, other content types
// byte for byte, and a model that does not exist.
func TestPredict(t *testing.T) {
	admin := as(t, adminKey)
	waitActive(t, stack.ModelName, stack.ModelDeploymentName)
	in := writeFile(t, "in.json", `{"text":"I love it"}`)
	if r := admin.ok("predict", stack.ModelName, "-f", in); strings.TrimSpace(r.stdout) != `{"label":"positive","score":0.6667,"deployment":"demo-model-v1"}` {
		t.Errorf("predict -f: %v", r)
	}
	if got := admin.json("predict", stack.ModelName, "--environment", stack.ModelStagingEnv, "-f", in); got["label"] != "positive" {
		t.Errorf("predict --environment -o json: %v", got)
	}
	stdin := &cli{t: t, key: adminKey, stdin: "raw bytes"}
	if r := stdin.ok("predict", stack.ModelName, "--deployment", stack.ModelDeploymentName, "--content-type", "application/octet-stream"); r.stdout != "raw bytes\n" {
		t.Errorf("predict from stdin: %q", r.stdout)
	}
	admin.refused(exitNotFound, []string{"HTTP 404 model_does_not_exist"}, "predict", "no-such-model", "-f", in)
	admin.refused(exitUsage, []string{"give only one of"}, "predict", stack.ModelName, "--environment", "staging", "--development", "-f", in)
}

// waitActive waits until a deployment of model is ACTIVE, read through the CLI.
func waitActive(t *testing.T, model, deployment string) {
	t.Helper()
	admin := as(t, adminKey)
	eventually(t, deployment+" ACTIVE", func() (bool, string) {
		r := admin.run("models", "deployments", model)
		for _, line := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == deployment && f[1] == "ACTIVE" {
				return true, r.String()
			}
		}
		return false, r.String()
	})
}

// TestChainsDelete: delete takes the seeded chain out; a second delete is a 404.
func TestChainsDelete(t *testing.T) {
	admin := as(t, adminKey)
	if r := admin.ok("chains", "delete", stack.ChainName); !strings.Contains(r.stdout, "Deleted chain "+stack.ChainName) {
		t.Errorf("delete: %v", r)
	}
	admin.refused(exitNotFound, []string{"HTTP 404 not_found"}, "chains", "delete", stack.ChainName)
}
