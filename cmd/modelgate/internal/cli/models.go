package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

var (
	modelColumns = []column{
		{"ID", "id"}, {"NAME", "name"}, {"PRODUCTION", "production_deployment_id"}, {"DEVELOPMENT", "development_deployment_id"},
		{"DEPLOYMENTS", "deployments_count"}, {"TEAM", "team_name"}, {"CREATED", "created_at"},
	}
	deploymentColumns = []column{
		{"ID", "id"}, {"STATUS", "status"}, {"REPLICAS", "active_replica_count"}, {"ENVIRONMENT", "environment"},
		{"PRODUCTION", "is_production"}, {"CREATED", "created_at"},
	}
	environmentColumns = []column{
		{"NAME", "name"}, {"MODEL", "model_id"}, {"DEPLOYMENT", "current_deployment.id"}, {"STATUS", "current_deployment.status"},
	}
	logColumns = []column{{"TIME", "timestamp"}, {"LEVEL", "level"}, {"REPLICA", "replica"}, {"REQUEST", "request_id"}, {"MESSAGE", "message"}}
)

func (a *app) modelsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "models",
		Short: "Models and their deployments: list, get, deployments, activate, deactivate, promote, retry, logs",
		Long: `Models, deployments and environments (/v1/models). A deployment argument may also be "production" or
"development", as on every deployment route. Creating and changing models is done with kubectl (Model and
ModelDeployment objects): the REST API has no route for it yet.`,
		Example: "  modelgate models list\n  modelgate models activate demo-model --environment staging",
	}
	cmd.AddCommand(a.modelsListCmd(), a.modelsGetCmd(), a.modelsDeploymentsCmd(), a.activationCmd("activate"),
		a.activationCmd("deactivate"), a.promoteCmd(), a.retryCmd(), a.logsCmd())
	return cmd
}

func (a *app) modelsListCmd() *cobra.Command {
	return a.command(verb{
		use: "list", short: "List the models this key may see",
		example: "  modelgate models list\n  modelgate models list -o yaml",
		request: func([]string) Request { return get("v1", "models") },
		show:    showList("models", modelColumns),
	})
}

func (a *app) modelsGetCmd() *cobra.Command {
	return a.command(verb{
		use: "get MODEL_ID", short: "Show one model",
		example: "  modelgate models get demo-model",
		args:    []string{"MODEL_ID"},
		request: func(args []string) Request { return get("v1", "models", args[0]) },
		show:    showOne(modelColumns),
	})
}

func (a *app) modelsDeploymentsCmd() *cobra.Command {
	return a.command(verb{
		use: "deployments MODEL_ID", short: "List a model's deployments and their status",
		example: "  modelgate models deployments demo-model",
		args:    []string{"MODEL_ID"},
		request: func(args []string) Request { return get("v1", "models", args[0], "deployments") },
		show:    showList("deployments", deploymentColumns),
	})
}

// activationCmd is activate or deactivate, of a deployment or of the deployment an environment serves.
func (a *app) activationCmd(verb string) *cobra.Command {
	var deployment, environment string
	cmd := &cobra.Command{
		Use:   verb + " MODEL_ID (--deployment ID | --environment NAME)",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " a deployment, or the one an environment serves",
		Long: verb + ` calls POST /v1/models/{model_id}/deployments/{deployment_id}/` + verb + ` or
POST /v1/models/{model_id}/environments/{env_name}/` + verb + `. The answer says whether anything changed
(no_op is true when the deployment already was so). The server allows 20 per minute per key and route.`,
		Example: "  modelgate models " + verb + " demo-model --deployment demo-model-v1\n  modelgate models " + verb + " demo-model --environment staging --wait",
		Args:    args("MODEL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			which, err := oneOf(cmd, true, "deployment", "environment")
			if err != nil {
				return err
			}
			p := path("v1", "models", args[0], "deployments", deployment, verb)
			if which == "environment" {
				p = path("v1", "models", args[0], "environments", environment, verb)
			}
			out, err := a.call(cmd.Context(), Request{Method: http.MethodPost, Path: p})
			if err != nil {
				return err
			}
			return a.printer().sentence(out, func(v map[string]any) string {
				target := which + " " + deployment + environment
				if v["no_op"] == true {
					return fmt.Sprintf("Nothing to do: %s of %s is already %s", target, args[0], map[string]string{"activate": "active", "deactivate": "inactive"}[verb])
				}
				return fmt.Sprintf("%sd %s of %s", strings.ToUpper(verb[:1])+verb[1:], target, args[0])
			})
		},
	}
	cmd.Flags().StringVar(&deployment, "deployment", "", "deployment id (or production, development)")
	cmd.Flags().StringVar(&environment, "environment", "", "environment name")
	return cmd
}

func (a *app) promoteCmd() *cobra.Command {
	var environment, deployment string
	var keep bool
	cmd := &cobra.Command{
		Use:   "promote MODEL_ID --environment NAME --deployment ID",
		Short: "Point an environment at a deployment",
		Long: `promote points an environment at an active deployment (POST .../environments/{env_name}/promote). The
previous deployment is scaled to zero once gatewayd routes by the new pointer, unless --keep-previous or another
environment still serves it.`,
		Example: "  modelgate models promote demo-model --environment production --deployment demo-model-v2",
		Args:    args("MODEL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if environment == "" {
				return usageErrorf("give --environment")
			}
			body := map[string]any{"deployment_id": deployment}
			if keep {
				body["scale_down_previous_deployment"] = false
			}
			raw, _ := json.Marshal(body)
			out, err := a.call(cmd.Context(), Request{Method: http.MethodPost, Path: path("v1", "models", args[0], "environments", environment, "promote"), Body: raw})
			if err != nil {
				return err
			}
			return a.printer().one(out, environmentColumns)
		},
	}
	cmd.Flags().StringVar(&environment, "environment", "", "environment to point")
	cmd.Flags().StringVar(&deployment, "deployment", "", "deployment id to serve it")
	cmd.Flags().BoolVar(&keep, "keep-previous", false, "do not scale the previous deployment down")
	return cmd
}

func (a *app) retryCmd() *cobra.Command {
	return a.command(verb{
		use: "retry MODEL_ID DEPLOYMENT_ID", short: "Retry a failed deployment",
		long: `retry retries a deployment in DEPLOY_FAILED, BUILD_FAILED or FAILED (POST .../retry); any other
status answers retried: false with the reason. The server allows 10 per minute per key.`,
		example: "  modelgate models retry demo-model demo-model-v1",
		args:    []string{"MODEL_ID", "DEPLOYMENT_ID"},
		request: func(args []string) Request {
			return Request{Method: http.MethodPost, Path: path("v1", "models", args[0], "deployments", args[1], "retry")}
		},
		show: say(func(v map[string]any, args []string) string {
			if v["retried"] == true {
				return "Retrying " + args[1]
			}
			return fmt.Sprintf("Not retried: %s (status %s)", cell(v["reason"]), cell(lookup(v, "deployment.status")))
		}),
	})
}

func (a *app) logsCmd() *cobra.Command {
	var since time.Duration
	var limit int
	var level, search string
	var asc bool
	cmd := &cobra.Command{
		Use:   "logs MODEL_ID DEPLOYMENT_ID",
		Short: "Show a deployment's logs: Events, gatewayd's call log and its pods",
		Long: `logs reads POST .../deployments/{deployment_id}/logs: the deployment's Events, every gatewayd replica's
log of the calls it made, and a container source's pod logs, merged by time, newest first.`,
		Example: "  modelgate models logs demo-model demo-model-v1 --since 1h --level WARNING\n  modelgate models logs demo-model production --search 'req_[0-9a-z]+' --limit 20",
		Args:    args("MODEL_ID", "DEPLOYMENT_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			set := cmd.Flags().Changed
			if set("since") {
				body["start_epoch_millis"] = time.Now().Add(-since).UnixMilli()
			}
			if set("limit") {
				body["limit"] = limit
			}
			if set("level") {
				body["min_level"] = level
			}
			if set("search") {
				body["search_pattern"] = search
			}
			if asc {
				body["direction"] = "asc"
			}
			raw, _ := json.Marshal(body)
			out, err := a.call(cmd.Context(), Request{Method: http.MethodPost, Path: path("v1", "models", args[0], "deployments", args[1], "logs"), Body: raw})
			if err != nil {
				return err
			}
			return a.printer().list(out, "logs", logColumns)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&since, "since", 0, "only lines newer than this (default: the last day)")
	f.IntVar(&limit, "limit", 0, "at most this many lines, 1 to 1000 (default 100)")
	f.StringVar(&level, "level", "", "lowest level: DEBUG, INFO, WARNING or ERROR")
	f.StringVar(&search, "search", "", "a regular expression (RE2) the message or request id holds")
	f.BoolVar(&asc, "asc", false, "oldest first")
	_ = cmd.RegisterFlagCompletionFunc("level", cobra.FixedCompletions([]string{"DEBUG", "INFO", "WARNING", "ERROR"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
