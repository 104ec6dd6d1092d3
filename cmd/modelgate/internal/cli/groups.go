package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

var groupColumns = []column{
	{"ID", "id"}, {"NAME", "metadata.name"}, {"EXTERNAL ID", "metadata.external_entity_id"},
	{"PARENT", "hierarchy.parent_group_id"}, {"MODE", "hierarchy.limit_enforcement"}, {"MODELS", "models[].slug"},
	{"CREATED", "created_at"},
}

var groupKeyColumns = []column{{"PREFIX", "prefix"}, {"NAME", "name"}}

// pageFlags are the list flags of the paginated routes (docs/rest-api.md "Pagination").
type pageFlags struct {
	limit  int
	cursor string
	all    bool
}

func (p *pageFlags) bind(cmd *cobra.Command) {
	cmd.Flags().IntVar(&p.limit, "limit", 0, "items per page, 1 to 1000 (default: the server's, 100)")
	cmd.Flags().StringVar(&p.cursor, "cursor", "", "the cursor a previous page answered")
	cmd.Flags().BoolVar(&p.all, "all", false, "follow the cursor until the list is drained")
}

// fetch reads one page, or with --all every page, answered as one page whose has_more is false.
func (p *pageFlags) fetch(ctx context.Context, a *app, pathname string, q url.Values) ([]byte, error) {
	if q == nil {
		q = url.Values{}
	}
	if p.limit != 0 {
		q.Set("limit", strconv.Itoa(p.limit))
	}
	cursor := p.cursor
	var items []json.RawMessage
	for {
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		out, err := a.call(ctx, Request{Method: http.MethodGet, Path: pathname, Query: q})
		if err != nil || !p.all {
			return out, err
		}
		var page struct {
			Items      []json.RawMessage `json:"items"`
			Pagination struct {
				HasMore bool    `json:"has_more"`
				Cursor  *string `json:"cursor"`
			} `json:"pagination"`
		}
		if err := json.Unmarshal(out, &page); err != nil {
			return nil, fmt.Errorf("the server answered a page that is not JSON: %w", err)
		}
		items = append(items, page.Items...)
		if !page.Pagination.HasMore || page.Pagination.Cursor == nil {
			if items == nil {
				items = []json.RawMessage{}
			}
			return json.Marshal(map[string]any{"items": items, "pagination": map[string]any{"has_more": false, "cursor": nil}})
		}
		cursor = *page.Pagination.Cursor
	}
}

// readDocument reads a JSON or YAML body from a file (or stdin for "-") as JSON.
func (a *app) readDocument(name string) (map[string]any, error) {
	raw, err := a.readInput(name)
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s is neither JSON nor YAML: %w", name, err)
	}
	doc := map[string]any{}
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("%s does not hold one object: %w", name, err)
	}
	return doc, nil
}

// child returns doc[key] as an object, creating it.
func child(doc map[string]any, key string) map[string]any {
	m, ok := doc[key].(map[string]any)
	if !ok {
		m = map[string]any{}
		doc[key] = m
	}
	return m
}

func (a *app) groupsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "Groups (gateway customers): list, get, create, update, delete, usage",
		Long: `Groups of the gateway (/v1/gateway/groups): the customers that federated keys belong to, with their
models, rate and usage limits and hierarchy. See docs/rest-api.md "Groups".`,
		Example: "  modelgate groups list\n  modelgate groups create --name acme --external-id cust-0042 --model demo/echo",
	}
	cmd.AddCommand(a.groupsListCmd(), a.groupsGetCmd(), a.groupsCreateCmd(), a.groupsUpdateCmd(), a.groupsDeleteCmd(), a.groupsUsageCmd())
	return cmd
}

func (a *app) groupsListCmd() *cobra.Command {
	var page pageFlags
	var external string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List groups, one page at a time (--all for every page)",
		Example: "  modelgate groups list --all\n  modelgate groups list --external-id cust-0042 -o json",
		Args:    args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if external != "" {
				q.Set("external_entity_id", external)
			}
			out, err := page.fetch(cmd.Context(), a, "/v1/gateway/groups", q)
			if err != nil {
				return err
			}
			return a.printer().list(out, "items", groupColumns)
		},
	}
	page.bind(cmd)
	cmd.Flags().StringVar(&external, "external-id", "", "look one group up by its external entity id")
	return cmd
}

func (a *app) groupsGetCmd() *cobra.Command {
	return a.command(verb{
		use: "get GROUP_ID", short: "Show one group",
		example: "  modelgate groups get grp-0123456789abcdef -o yaml",
		args:    []string{"GROUP_ID"},
		request: func(args []string) Request { return get("v1", "gateway", "groups", args[0]) },
		show:    showOne(groupColumns),
	})
}

// groupBody is what create and update share: a body from -f, then the flags set over it.
type groupBody struct {
	file, name, external, parent, mode string
	models                             []string
	dryRun                             bool
}

func (g *groupBody) bind(cmd *cobra.Command, create bool) {
	f := cmd.Flags()
	f.StringVarP(&g.file, "file", "f", "", "the request body, JSON or YAML (- for stdin); the flags below are set over it")
	f.StringVar(&g.name, "name", "", "metadata.name")
	f.StringSliceVar(&g.models, "model", nil, "a model slug without limits (repeatable; replaces models)")
	f.BoolVar(&g.dryRun, "dry-run", false, "let the server judge the write and store nothing")
	if create {
		f.StringVar(&g.external, "external-id", "", "metadata.external_entity_id")
		f.StringVar(&g.parent, "parent", "", "hierarchy.parent_group_id")
		f.StringVar(&g.mode, "mode", "", "hierarchy.limit_enforcement: INDEPENDENT or CASCADING")
		_ = cmd.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{"INDEPENDENT", "CASCADING"}, cobra.ShellCompDirectiveNoFileComp))
	}
}

func (g *groupBody) build(a *app, cmd *cobra.Command) ([]byte, url.Values, error) {
	doc := map[string]any{}
	if g.file != "" {
		var err error
		if doc, err = a.readDocument(g.file); err != nil {
			return nil, nil, err
		}
	}
	set := cmd.Flags().Changed
	if set("name") {
		child(doc, "metadata")["name"] = g.name
	}
	if set("external-id") {
		child(doc, "metadata")["external_entity_id"] = g.external
	}
	if set("parent") {
		child(doc, "hierarchy")["parent_group_id"] = g.parent
	}
	if set("mode") {
		child(doc, "hierarchy")["limit_enforcement"] = g.mode
	}
	if set("model") {
		models := make([]any, len(g.models))
		for i, m := range g.models {
			models[i] = map[string]any{"slug": m}
		}
		doc["models"] = models
	}
	var q url.Values
	if g.dryRun {
		q = url.Values{"dry_run": {"true"}}
	}
	raw, err := json.Marshal(doc)
	return raw, q, err
}

// send is the RunE of create and update: the body, sent to the path the arguments name, the group printed.
func (g *groupBody) send(a *app, method string, pathOf func(args []string) string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		raw, q, err := g.build(a, cmd)
		if err != nil {
			return err
		}
		out, err := a.call(cmd.Context(), Request{Method: method, Path: pathOf(args), Query: q, Body: raw})
		if err != nil {
			return err
		}
		return a.printer().one(out, groupColumns)
	}
}

func (a *app) groupsCreateCmd() *cobra.Command {
	var g groupBody
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a group from flags or a JSON/YAML body (-f)",
		Long: `create writes a group (POST /v1/gateway/groups). Limits are given in a body file (the API's shape, see
docs/rest-api.md); --name, --external-id, --parent, --mode and --model are set over it.`,
		Example: `  modelgate groups create --name acme --external-id cust-0042 --model demo/echo
  modelgate groups create -f acme.yaml --dry-run
  # acme.yaml:
  #   metadata: {name: acme, external_entity_id: cust-0042}
  #   models: [{slug: demo/echo, rate_limits: [{type: REQUEST, unit: MINUTE, threshold: 600}]}]`,
		Args: args(),
		RunE: g.send(a, http.MethodPost, func([]string) string { return "/v1/gateway/groups" }),
	}
	g.bind(cmd, true)
	return cmd
}

func (a *app) groupsUpdateCmd() *cobra.Command {
	var g groupBody
	cmd := &cobra.Command{
		Use:   "update GROUP_ID",
		Short: "Change a group's name or models (PATCH)",
		Long: `update patches a group (PATCH /v1/gateway/groups/{group_id}): metadata.name and/or models, whose list
replaces the group's. The hierarchy and the external id cannot change.`,
		Example: "  modelgate groups update grp-0123456789abcdef --name acme-renamed\n  modelgate groups update grp-0123456789abcdef -f models.json --dry-run",
		Args:    args("GROUP_ID"),
		RunE:    g.send(a, http.MethodPatch, func(args []string) string { return path("v1", "gateway", "groups", args[0]) }),
	}
	g.bind(cmd, false)
	return cmd
}

func (a *app) groupsDeleteCmd() *cobra.Command {
	return a.command(verb{
		use: "delete GROUP_ID", short: "Delete a group, its subtree and all their keys",
		example: "  modelgate groups delete grp-0123456789abcdef",
		args:    []string{"GROUP_ID"},
		request: func(args []string) Request { return del("v1", "gateway", "groups", args[0]) },
		show: say(func(v map[string]any, _ []string) string {
			return fmt.Sprintf("Deleted group %s (%s)", cell(v["id"]), cell(lookup(v, "metadata.external_entity_id")))
		}),
	})
}

var usageColumns = []column{{"SLUG", "slug"}, {"TYPE", "type"}, {"USED", "current_usage"}, {"THRESHOLD", "threshold"},
	{"SOURCE GROUP", "source_group"}, {"RESETS", "reset_at"}}

func (a *app) groupsUsageCmd() *cobra.Command {
	return a.command(verb{
		use: "usage GROUP_ID", short: "Show a group's usage against each DAY and MONTH limit in force",
		example: "  modelgate groups usage grp-0123456789abcdef",
		args:    []string{"GROUP_ID"},
		request: func(args []string) Request { return get("v1", "gateway", "groups", args[0], "usage") },
		show: func(p printer, out []byte, _ []string) error {
			return p.raw(out, func(v any) error {
				var rows []any
				usage, _ := lookup(v, "usage").(map[string]any)
				for _, slug := range slices.Sorted(maps.Keys(usage)) {
					entries, _ := usage[slug].([]any)
					for _, e := range entries {
						if m, ok := e.(map[string]any); ok {
							m["slug"] = slug
							rows = append(rows, m)
						}
					}
				}
				p.table(rows, usageColumns)
				return nil
			})
		},
	})
}

func (a *app) groupKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group-keys",
		Short: "Federated keys of a group: list, get, create, delete",
		Long: `Federated (gateway) keys of a group (/v1/gateway/groups/{group_id}/api_keys), which end users call
models with. Registering a key you minted yourself (POST .../api_keys/register) needs your service's Ed25519
signature over the body and is not a CLI verb; call the route directly (docs/rest-api.md "Federated keys").`,
		Example: "  modelgate group-keys create grp-0123456789abcdef --name alice\n  modelgate group-keys list grp-0123456789abcdef",
	}
	list := &cobra.Command{
		Use:     "list GROUP_ID",
		Short:   "List a group's keys (prefix and name)",
		Example: "  modelgate group-keys list grp-0123456789abcdef --all",
		Args:    args("GROUP_ID"),
	}
	var page pageFlags
	page.bind(list)
	list.RunE = func(cmd *cobra.Command, args []string) error {
		out, err := page.fetch(cmd.Context(), a, path("v1", "gateway", "groups", args[0], "api_keys"), nil)
		if err != nil {
			return err
		}
		return a.printer().list(out, "items", groupKeyColumns)
	}
	get := a.command(verb{
		use: "get GROUP_ID PREFIX", short: "Show one key of a group",
		example: "  modelgate group-keys get grp-0123456789abcdef mgk_AbCdEfGhIjKl",
		args:    []string{"GROUP_ID", "PREFIX"},
		request: func(args []string) Request { return get("v1", "gateway", "groups", args[0], "api_keys", args[1]) },
		show:    showOne(groupKeyColumns),
	})
	var name string
	create := &cobra.Command{
		Use:     "create GROUP_ID",
		Short:   "Mint a key for a group and print it once",
		Example: "  modelgate group-keys create grp-0123456789abcdef --name alice\n  KEY=$(modelgate group-keys create grp-0123456789abcdef)",
		Args:    args("GROUP_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if cmd.Flags().Changed("name") {
				body["name"] = name
			}
			raw, _ := json.Marshal(body)
			out, err := a.call(cmd.Context(), Request{Method: http.MethodPost, Path: path("v1", "gateway", "groups", args[0], "api_keys"), Body: raw})
			if err != nil {
				return err
			}
			return a.showSecret(out)
		},
	}
	create.Flags().StringVar(&name, "name", "", "the key's name")
	remove := a.command(verb{
		use: "delete GROUP_ID PREFIX", short: "Revoke a key of a group (irreversible)",
		example: "  modelgate group-keys delete grp-0123456789abcdef mgk_AbCdEfGhIjKl",
		args:    []string{"GROUP_ID", "PREFIX"},
		request: func(args []string) Request { return del("v1", "gateway", "groups", args[0], "api_keys", args[1]) },
		show:    say(func(v map[string]any, _ []string) string { return "Revoked " + cell(v["prefix"]) }),
	})
	cmd.AddCommand(list, get, create, remove)
	return cmd
}
