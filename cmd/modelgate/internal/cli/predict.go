package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
)

// target is the part of a model route that picks the deployment: production (the default), development, an
// environment or a deployment id.
type target struct {
	environment, deployment string
	development             bool
}

func (t *target) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&t.environment, "environment", "", "call the deployment this environment serves (default production)")
	cmd.Flags().StringVar(&t.deployment, "deployment", "", "call this deployment id")
	cmd.Flags().BoolVar(&t.development, "development", false, "call the development deployment")
}

// path is /models/{model_id}/{production|development|environments/{env}|deployment/{id}}/route.
func (t *target) path(cmd *cobra.Command, model, route string) (string, error) {
	which, err := oneOf(cmd, false, "environment", "deployment", "development")
	if err != nil {
		return "", err
	}
	switch which {
	case "environment":
		return path("models", model, "environments", t.environment, route), nil
	case "deployment":
		return path("models", model, "deployment", t.deployment, route), nil
	case "development":
		return path("models", model, "development", route), nil
	}
	return path("models", model, "production", route), nil
}

func (a *app) predictCmd() *cobra.Command {
	var t target
	var file, contentType string
	cmd := &cobra.Command{
		Use:   "predict MODEL_ID [-f FILE]",
		Short: "Call a model with a body from a file or stdin",
		Long: `predict sends the body to the model's predict route (POST /models/{model_id}/production/predict, or the
environment, deployment or development route) unchanged, and prints the model's answer as it came (a JSON answer
indented with -o json, as YAML with -o yaml); on a terminal, control characters are printed escaped (\x1b). The body is read from -f FILE, or stdin.`,
		Example: `  modelgate predict demo-model -f input.json
  echo '{"text":"I love it"}' | modelgate predict demo-model --environment staging
  modelgate predict demo-model --content-type application/octet-stream -f image.png`,
		Args: args("MODEL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := t.path(cmd, args[0], "predict")
			if err != nil {
				return err
			}
			body, err := a.readInput(file)
			if err != nil {
				return err
			}
			out, err := a.call(cmd.Context(), Request{Method: http.MethodPost, Path: p, Body: body, ContentType: contentType})
			if err != nil {
				return err
			}
			if a.output == FormatTable || !json.Valid(out) {
				if a.stdoutTTY {
					// For a person, not a file: the model's words escaped as server text is.
					out = []byte(printableLines(string(out)))
				}
				_, err := a.stdout.Write(out)
				if err == nil && !bytes.HasSuffix(out, []byte("\n")) {
					_, err = fmt.Fprintln(a.stdout)
				}
				return err
			}
			return a.printer().raw(out, nil)
		},
	}
	t.bind(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the request body (default: stdin)")
	cmd.Flags().StringVar(&contentType, "content-type", "application/json", "the body's Content-Type")
	return cmd
}

var asyncColumns = []column{
	{"REQUEST", "request_id"}, {"MODEL", "model_id"}, {"DEPLOYMENT", "deployment_id"}, {"STATUS", "status"},
	{"WEBHOOK", "webhook_status"}, {"CREATED", "created_at"}, {"ERRORS", "errors[].message"},
}

func (a *app) asyncCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "async",
		Short: "Async model calls: predict, status, cancel",
		Long: `Async inference (docs/rest-api.md "Async inference"): predict queues a call and answers its request id
at once; status reads it; cancel cancels it while it is still QUEUED. Status and cancel are rate limited per
key: --wait waits once on a 429.`,
		Example: "  modelgate async predict demo-model -f input.json\n  modelgate async status demo-model 9f1c...",
	}
	var t target
	var file, webhook string
	var priority, maxQueue, attempts int
	predict := &cobra.Command{
		Use:   "predict MODEL_ID [-f FILE]",
		Short: "Queue a model call; prints its request id",
		Long: `async predict sends {"model_input": <the JSON in FILE or stdin>, ...} to the async_predict route and
prints the request id. The flags fill the body's other fields; the server checks each and names the field it
refuses (priority 0..2, max_time_in_queue_seconds 10..259200, inference_retry_config.max_attempts 1..10).`,
		Example: `  modelgate async predict demo-model -f input.json --priority 1
  echo '{"text":"hello"}' | modelgate async predict demo-model --webhook https://example.com/hook`,
		Args: args("MODEL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := t.path(cmd, args[0], "async_predict")
			if err != nil {
				return err
			}
			in, err := a.readInput(file)
			if err != nil {
				return err
			}
			if !json.Valid(in) {
				return usageErrorf("the model input must be JSON")
			}
			body := map[string]any{"model_input": json.RawMessage(in)}
			set := cmd.Flags().Changed
			if set("webhook") {
				body["webhook_endpoint"] = webhook
			}
			if set("priority") {
				body["priority"] = priority
			}
			if set("max-time-in-queue") {
				body["max_time_in_queue_seconds"] = maxQueue
			}
			if set("max-attempts") {
				body["inference_retry_config"] = map[string]any{"max_attempts": attempts}
			}
			raw, err := json.Marshal(body)
			if err != nil {
				return err
			}
			out, err := a.call(cmd.Context(), Request{Method: http.MethodPost, Path: p, Body: raw})
			if err != nil {
				return err
			}
			return a.printer().sentence(out, func(v map[string]any) string { return cell(v["request_id"]) })
		},
	}
	t.bind(predict)
	f := predict.Flags()
	f.StringVarP(&file, "file", "f", "", "the model input, JSON (default: stdin)")
	f.StringVar(&webhook, "webhook", "", "webhook_endpoint: an https URL the result is POSTed to")
	f.IntVar(&priority, "priority", 0, "priority: 0..2, lower runs first")
	f.IntVar(&maxQueue, "max-time-in-queue", 0, "max_time_in_queue_seconds: 10..259200 (default 600)")
	f.IntVar(&attempts, "max-attempts", 0, "inference_retry_config.max_attempts: 1..10 (default 3)")

	status := a.command(verb{
		use: "status MODEL_ID REQUEST_ID", short: "Show an async request's status",
		example: "  modelgate async status demo-model 9f1c...\n  modelgate async status demo-model 9f1c... -o json | jq -r .status",
		args:    []string{"MODEL_ID", "REQUEST_ID"},
		request: func(args []string) Request { return get("models", args[0], "async_request", args[1]) },
		show:    showOne(asyncColumns),
	})
	cancel := a.command(verb{
		use: "cancel MODEL_ID REQUEST_ID", short: "Cancel a queued async request",
		example: "  modelgate async cancel demo-model 9f1c...",
		args:    []string{"MODEL_ID", "REQUEST_ID"},
		request: func(args []string) Request { return del("models", args[0], "async_request", args[1]) },
		show: say(func(v map[string]any, args []string) string {
			if v["canceled"] == true {
				return "Canceled " + args[1]
			}
			return "Not canceled: " + cell(v["message"])
		}),
	})
	cmd.AddCommand(predict, status, cancel)
	return cmd
}

func (a *app) chainsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chains",
		Short: "Chains: delete",
		Long: `Chains (/v1/chains). delete takes a chain out of service at once and deletes its deployments and
chainlets. Listing, environments and promotion have routes too (docs/rest-api.md "Chains") but no CLI verb yet.`,
		Example: "  modelgate chains delete demo-chain",
	}
	cmd.AddCommand(a.command(verb{
		use: "delete CHAIN_ID", short: "Delete a chain and its deployments",
		example: "  modelgate chains delete demo-chain",
		args:    []string{"CHAIN_ID"},
		request: func(args []string) Request { return del("v1", "chains", args[0]) },
		show:    say(func(v map[string]any, _ []string) string { return "Deleted chain " + cell(v["id"]) }),
	}))
	return cmd
}
