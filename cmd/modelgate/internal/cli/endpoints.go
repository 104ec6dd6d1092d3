package cli

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
)

var (
	// endpointColumns show an endpoint's first target; target_count and first_target are added by endpointRows.
	endpointColumns = []column{
		{"ID", "id"}, {"SLUG", "slug"}, {"TARGETS", "target_count"}, {"PROVIDER", "first_target.provider"},
		{"BASE URL", "first_target.base_url"}, {"UPDATED", "updated_at"},
	}
	targetColumns = []column{
		{"NAME", "name"}, {"PROVIDER", "provider"}, {"BASE URL", "base_url"}, {"MODEL", "target_model"},
		{"WEIGHT", "weight"}, {"PRIORITY", "priority"}, {"SECRET", "api_key_secret_ref.name"},
		{"INPUT $/1M", "pricing.input_per_million_tokens"}, {"OUTPUT $/1M", "pricing.output_per_million_tokens"},
	}
)

// endpointRows adds to each endpoint the two cells a table shows that the answer does not hold as such: the
// number of its targets and its first target.
func endpointRows(items []any) []any {
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			targets, _ := m["targets"].([]any)
			m["target_count"] = len(targets)
			if len(targets) > 0 {
				m["first_target"] = targets[0]
			}
		}
	}
	return items
}

func (a *app) endpointsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "endpoints",
		Short: "Endpoints (a slug routed to its upstream targets): list, get, apply, delete",
		Long: `Endpoints of the gateway (/v1/gateway/endpoints): each routes a model slug to 1 to 16 upstream targets,
with weights, priorities, retry and cooldown. See docs/rest-api.md "Endpoints".`,
		Example: "  modelgate endpoints list\n  modelgate endpoints apply -f chat-llama.yaml",
	}
	cmd.AddCommand(a.endpointsListCmd(), a.endpointsGetCmd(), a.endpointsApplyCmd(), a.endpointsDeleteCmd())
	return cmd
}

func (a *app) endpointsListCmd() *cobra.Command {
	var page pageFlags
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List endpoints, one page at a time (--all for every page)",
		Example: "  modelgate endpoints list --all\n  modelgate endpoints list -o yaml",
		Args:    args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := page.fetch(cmd.Context(), a, "/v1/gateway/endpoints", nil)
			if err != nil {
				return err
			}
			return a.printer().listRows(out, "items", endpointColumns, endpointRows)
		},
	}
	page.bind(cmd)
	return cmd
}

// showEndpoint prints one endpoint as a row, then a table of its targets.
func showEndpoint(p printer, out []byte, _ []string) error {
	return p.raw(out, func(v any) error {
		p.table(endpointRows([]any{v}), endpointColumns)
		targets, _ := lookup(v, "targets").([]any)
		fmt.Fprintln(p.out)
		p.table(targets, targetColumns)
		return nil
	})
}

func (a *app) endpointsGetCmd() *cobra.Command {
	return a.command(verb{
		use: "get ENDPOINT_ID", short: "Show one endpoint and its targets",
		example: "  modelgate endpoints get ep-0123456789abcdef\n  modelgate endpoints get ep-0123456789abcdef -o yaml",
		args:    []string{"ENDPOINT_ID"},
		request: func(args []string) Request { return get("v1", "gateway", "endpoints", args[0]) },
		show:    showEndpoint,
	})
}

func (a *app) endpointsApplyCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create an endpoint, or update the one of its slug, from a JSON/YAML body",
		Long: `apply takes one endpoint in the REST API's shape (docs/rest-api.md "Endpoints"): when no endpoint has
its slug, it is created (POST /v1/gateway/endpoints); otherwise that endpoint is patched with the rest of the
body (PATCH /v1/gateway/endpoints/{endpoint_id}), whose targets replace the endpoint's and whose retry or
cooldown, when given, replace its own ({} returns to the gateway's defaults).`,
		Example: `  modelgate endpoints apply -f chat-llama.yaml
  # chat-llama.yaml:
  #   slug: chat/llama
  #   targets:
  #   - {name: vllm-a, provider: OPENAI, base_url: "http://vllm-a:8000/v1", weight: 3,
  #      pricing: {input_per_million_tokens: "0.60", output_per_million_tokens: "0.80"}}
  #   - {name: vllm-b, provider: OPENAI, base_url: "http://vllm-b:8000/v1", priority: 1}
  #   retry: {attempts: 1}
  #   cooldown: {failures: 3, duration_ms: 30000}`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErrorf("apply needs -f FILE (- for stdin)")
			}
			doc, err := a.readDocument(file)
			if err != nil {
				return err
			}
			slug, _ := doc["slug"].(string)
			if slug == "" {
				return usageErrorf("%s has no slug: apply finds the endpoint to create or update by its slug", file)
			}
			id, err := a.endpointOfSlug(cmd, slug)
			if err != nil {
				return err
			}
			req := Request{Method: http.MethodPost, Path: "/v1/gateway/endpoints"}
			if id != "" {
				delete(doc, "slug")
				req = Request{Method: http.MethodPatch, Path: path("v1", "gateway", "endpoints", id)}
			}
			if req.Body, err = json.Marshal(doc); err != nil {
				return err
			}
			out, err := a.call(cmd.Context(), req)
			if err != nil {
				return err
			}
			return showEndpoint(a.printer(), out, nil)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the endpoint, JSON or YAML (- for stdin)")
	return cmd
}

// endpointOfSlug is the id of the endpoint that routes slug, or "" when none does.
func (a *app) endpointOfSlug(cmd *cobra.Command, slug string) (string, error) {
	all := pageFlags{all: true, limit: 1000}
	out, err := all.fetch(cmd.Context(), a, "/v1/gateway/endpoints", nil)
	if err != nil {
		return "", err
	}
	var page struct {
		Items []struct {
			ID   string `json:"id"`
			Slug string `json:"slug"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &page); err != nil {
		return "", fmt.Errorf("the server answered a page that is not JSON: %w", err)
	}
	for _, e := range page.Items {
		if e.Slug == slug {
			return e.ID, nil
		}
	}
	return "", nil
}

func (a *app) endpointsDeleteCmd() *cobra.Command {
	return a.command(verb{
		use: "delete ENDPOINT_ID", short: "Delete an endpoint: calls to its slug fail from then on",
		example: "  modelgate endpoints delete ep-0123456789abcdef",
		args:    []string{"ENDPOINT_ID"},
		request: func(args []string) Request { return del("v1", "gateway", "endpoints", args[0]) },
		show:    say(func(v map[string]any, _ []string) string { return "Deleted endpoint " + cell(v["id"]) }),
	})
}
