package cli

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"github.com/modelgate/modelgate/api/v1alpha1"
)

var workspaceKeyColumns = []column{
	{"PREFIX", "prefix"}, {"NAME", "name"}, {"TYPE", "type"}, {"TEAM", "team_name"}, {"MODELS", "model_ids"},
	{"ENVIRONMENTS", "environments"}, {"OWNER", "owner.user_id"}, {"LAST USED", "last_used_at"}, {"CREATED", "created_at"},
}

// keyTypes are the workspace key types, read from the API's one list of them.
var keyTypes = func() []string {
	types := make([]string, len(v1alpha1.KeyTypes))
	for i, t := range v1alpha1.KeyTypes {
		types[i] = string(t)
	}
	return types
}()

func (a *app) keysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Workspace API keys: create, list, rename, revoke",
		Long: `Workspace API keys (/v1/api_keys). Which keys a caller sees, creates, renames and revokes follows the
permission table of docs/rest-api.md: PERSONAL keys and WORKSPACE_MANAGE_API_KEYS keys call these routes.`,
		Example: "  modelgate keys list\n  modelgate keys create --type WORKSPACE_INVOKE --name ci-invoke --model demo-model",
	}
	cmd.AddCommand(a.keysCreateCmd(), a.keysListCmd(), a.keysRenameCmd(), a.keysRevokeCmd())
	return cmd
}

func (a *app) keysCreateCmd() *cobra.Command {
	var body struct {
		Type         string   `json:"type"`
		Name         string   `json:"name"`
		TeamID       string   `json:"team_id,omitempty"`
		ModelIDs     []string `json:"model_ids,omitempty"`
		Environments []string `json:"environments,omitempty"`
	}
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a workspace key and print its secret once",
		Long: `create mints a workspace key (POST /v1/api_keys) and prints it. Only the key's prefix and hash are
stored: the secret is in this answer only, so store it now.

Rules (the server's, each refusal naming its field): --type is one of the key types (see --type); --name is 1 to 128
lowercase letters, digits and hyphens; --team never on PERSONAL or WORKSPACE_MANAGE_API_KEYS keys;
--environment only on WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys.`,
		Example: `  modelgate keys create --type WORKSPACE_INVOKE --name demo-invoke --model demo-model
  modelgate keys create --type WORKSPACE_MANAGE_ALL --name ml-deploy --team ml --environment staging
  KEY=$(modelgate keys create --type PERSONAL --name laptop)`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, _ := json.Marshal(body)
			out, err := a.call(cmd.Context(), Request{Method: http.MethodPost, Path: "/v1/api_keys", Body: raw})
			if err != nil {
				return err
			}
			return a.showSecret(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&body.Type, "type", "", "key type: "+strings.Join(keyTypes, ", "))
	f.StringVar(&body.Name, "name", "", "key name: lowercase letters, digits and hyphens")
	f.StringVar(&body.TeamID, "team", "", "team id the key is scoped to (team keys only)")
	f.StringSliceVar(&body.ModelIDs, "model", nil, "model id the key is scoped to (repeatable)")
	f.StringSliceVar(&body.Environments, "environment", nil, "environment the key is scoped to (repeatable)")
	_ = cmd.RegisterFlagCompletionFunc("type", cobra.FixedCompletions(keyTypes, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (a *app) keysListCmd() *cobra.Command {
	return a.command(verb{
		use: "list", short: "List the workspace keys this key may see",
		example: "  modelgate keys list\n  modelgate keys list -o json | jq -r '.keys[].prefix'",
		request: func([]string) Request { return get("v1", "api_keys") },
		show:    showList("keys", workspaceKeyColumns),
	})
}

func (a *app) keysRenameCmd() *cobra.Command {
	return a.command(verb{
		use: "rename PREFIX NAME", short: "Rename a workspace key",
		example: "  modelgate keys rename mgw_AbCdEfGhIjKl ci-invoke-2",
		args:    []string{"PREFIX", "NAME"},
		request: func(args []string) Request {
			raw, _ := json.Marshal(map[string]string{"name": args[1]})
			return Request{Method: http.MethodPatch, Path: path("v1", "api_keys", args[0]), Body: raw}
		},
		show: showOne(workspaceKeyColumns),
	})
}

func (a *app) keysRevokeCmd() *cobra.Command {
	return a.command(verb{
		use: "revoke PREFIX", short: "Revoke a workspace key (it stops authenticating before the answer)",
		example: "  modelgate keys revoke mgw_AbCdEfGhIjKl",
		args:    []string{"PREFIX"},
		request: func(args []string) Request { return del("v1", "api_keys", args[0]) },
		show:    say(func(v map[string]any, _ []string) string { return "Revoked " + cell(v["prefix"]) }),
	})
}
