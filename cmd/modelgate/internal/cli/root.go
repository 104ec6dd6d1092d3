// Package cli is the modelgate command line: one cobra command per verb over the /v1 REST API and the model
// routes (docs/rest-api.md), a small client of its own (client.go), the stored login (config.go) and the output
// formats (output.go). cmd/modelgate only calls Main.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/modelgate/modelgate/gatewayd/version"
)

// app holds what every command shares: the streams, the global flags and how to reach the server.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	stderrTTY      bool
	stdoutTTY      bool
	stdinTTY       bool

	output  string
	wait    bool
	timeout time.Duration
}

// usageError is a flag or argument the CLI refuses before calling anyone (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// Main runs the CLI with args (without the program name) and returns the process exit code: 0, or one of the
// Exit* codes, after printing the error on stderr.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	if f, ok := stderr.(*os.File); ok {
		a.stderrTTY = term.IsTerminal(int(f.Fd()))
	}
	if f, ok := stdout.(*os.File); ok {
		a.stdoutTTY = term.IsTerminal(int(f.Fd()))
	}
	if f, ok := stdin.(*os.File); ok {
		a.stdinTTY = term.IsTerminal(int(f.Fd()))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := a.root()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	// An error may carry the server's words (an answer, a redirect's Location): printed escaped.
	fmt.Fprintln(stderr, "Error: "+printableLines(err.Error()))
	var apiErr *APIError
	var usage usageError
	switch {
	case errors.As(err, &apiErr):
		return exitCode(apiErr.Status)
	case errors.As(err, &usage), strings.HasPrefix(err.Error(), "unknown command"):
		if cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return ExitUsage
	}
	return ExitError
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "modelgate",
		Short: "Manage a modelgate workspace and call its models",
		Long: `modelgate calls the modelgate REST API (/v1) and the model routes with a workspace API key.

Log in once with 'modelgate login' (the URL and key are stored in the user's config directory, mode 0600);
MODELGATE_URL and MODELGATE_API_KEY override what is stored.

Output is a table for people; -o json or -o yaml prints the server's answer for scripts.

Exit codes: 0 success, 1 other errors (network, files), 2 usage, 3 input refused by the server (400, 409, 413),
4 key missing, unknown or not allowed (401, 403), 5 not found (404), 6 rate limited (429), 7 server
unavailable (5xx). A refusal prints the server's error code and sentence, and one line per refused field.`,
		Example: `  modelgate login --url http://127.0.0.1:8080 < key.txt
  modelgate models list
  modelgate predict demo-model -f input.json
  modelgate keys list -o json`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch a.output {
			case FormatTable, FormatJSON, FormatYAML:
				return nil
			}
			return usageErrorf("-o must be table, json or yaml, not %q", a.output)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	pf := root.PersistentFlags()
	pf.StringVarP(&a.output, "output", "o", FormatTable, "output format: table, json or yaml")
	pf.BoolVar(&a.wait, "wait", false, fmt.Sprintf("on a 429, wait as long as the server says (retry_after or Retry-After) and try once more; never longer than --timeout or %s", MaxWaitLimit))
	pf.DurationVar(&a.timeout, "timeout", 5*time.Minute, "give up on a call after this long (an image upload only when this is given)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{FormatTable, FormatJSON, FormatYAML}, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(a.loginCmd(), a.keysCmd(), a.groupsCmd(), a.groupKeysCmd(), a.endpointsCmd(), a.modelsCmd(), a.predictCmd(),
		a.asyncCmd(), a.chainsCmd(), a.imagesCmd())
	completeModelIDs(root, a)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	addCompletionExamples(root)
	refuseUnknownVerbs(root)
	return root
}

// refuseUnknownVerbs makes a group of verbs ("modelgate keys") print its help when called alone, and refuse a verb
// it does not have with exit code 2 (cobra would print the help and exit 0).
func refuseUnknownVerbs(c *cobra.Command) {
	for _, sub := range c.Commands() {
		if sub.HasSubCommands() && sub.Run == nil && sub.RunE == nil {
			sub.Args = cobra.ArbitraryArgs
			sub.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErrorf("unknown command %q for %q", args[0], cmd.CommandPath())
				}
				return cmd.Help()
			}
		}
		refuseUnknownVerbs(sub)
	}
}

// addCompletionExamples gives cobra's own help and completion commands an example, as every command has one.
func addCompletionExamples(root *cobra.Command) {
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  modelgate help keys create"
		case "completion":
			c.Example = "  source <(modelgate completion bash)\n  modelgate completion zsh > \"${fpath[1]}/_modelgate\""
			for _, sh := range c.Commands() {
				sh.Example = "  modelgate completion " + sh.Name() + " > modelgate." + sh.Name()
			}
		}
	}
}

// completeModelIDs completes the MODEL_ID argument of every command that takes one first, from GET /v1/models
// with the stored login: `modelgate models get <TAB>`.
func completeModelIDs(c *cobra.Command, a *app) {
	if f := strings.Fields(c.Use); len(f) > 1 && f[1] == "MODEL_ID" {
		c.ValidArgsFunction = func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			out, err := a.call(cmd.Context(), get("v1", "models"))
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var list struct {
				Models []struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"models"`
			}
			_ = json.Unmarshal(out, &list)
			var ids []cobra.Completion
			for _, m := range list.Models {
				ids = append(ids, cobra.CompletionWithDesc(m.ID, m.Name))
			}
			return ids, cobra.ShellCompDirectiveNoFileComp
		}
	}
	for _, sub := range c.Commands() {
		completeModelIDs(sub, a)
	}
}

// client returns a Client for the stored login and the environment, or a usage error that says how to log in.
func (a *app) client() (*Client, error) {
	cfg, err := LoadConfig(a.getenv)
	if err != nil {
		return nil, err
	}
	if cfg.URL == "" {
		return nil, usageErrorf("no server URL: run 'modelgate login' or set %s", EnvURL)
	}
	if cfg.APIKey == "" {
		return nil, usageErrorf("no API key: run 'modelgate login' or set %s", EnvAPIKey)
	}
	return &Client{
		BaseURL: cfg.URL,
		APIKey:  cfg.APIKey,
		HTTP:    &http.Client{Timeout: a.timeout},
		Wait:    a.wait,
		MaxWait: a.timeout,
		Notice:  a.stderr,
	}, nil
}

// call sends one request with the login and returns the answer's body.
func (a *app) call(ctx context.Context, r Request) ([]byte, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(ctx, r)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func (a *app) printer() printer { return printer{format: a.output, out: a.stdout} }

// args checks the positional arguments against the names in the command's Use line.
func args(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageErrorf("%s takes %d argument(s), %s; got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// path joins escaped segments into a URL path: path("v1", "models", id) is /v1/models/<id>.
func path(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteString("/" + url.PathEscape(s))
	}
	return b.String()
}

// readInput reads the file name, or stdin for "-" or "". A terminal on stdin is refused: the CLI would wait for
// input the person did not mean to type.
func (a *app) readInput(name string) ([]byte, error) {
	if name != "" && name != "-" {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("failed to read %s: %w", name, err)
		}
		return b, nil
	}
	if a.stdinTTY {
		return nil, usageErrorf("give the body with -f FILE, or on stdin")
	}
	b, err := io.ReadAll(a.stdin)
	if err != nil {
		return nil, fmt.Errorf("failed to read stdin: %w", err)
	}
	return b, nil
}

// oneOf returns the one set flag of names, or a usage error when none or several are set and required says so.
func oneOf(cmd *cobra.Command, required bool, names ...string) (string, error) {
	var set []string
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			set = append(set, n)
		}
	}
	switch {
	case len(set) > 1:
		return "", usageErrorf("give only one of --%s", strings.Join(names, ", --"))
	case len(set) == 0 && required:
		return "", usageErrorf("give one of --%s", strings.Join(names, ", --"))
	case len(set) == 0:
		return "", nil
	}
	return set[0], nil
}

// verb is a command that sends one request made from its arguments and prints the answer: most verbs are one.
type verb struct {
	use, short, long, example string
	args                      []string
	request                   func(args []string) Request
	show                      func(p printer, out []byte, args []string) error
}

func (a *app) command(v verb) *cobra.Command {
	return &cobra.Command{
		Use: v.use, Short: v.short, Long: v.long, Example: v.example,
		Args: args(v.args...),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := a.call(cmd.Context(), v.request(args))
			if err != nil {
				return err
			}
			return v.show(a.printer(), out, args)
		},
	}
}

func get(segments ...string) Request { return Request{Method: http.MethodGet, Path: path(segments...)} }

func del(segments ...string) Request {
	return Request{Method: http.MethodDelete, Path: path(segments...)}
}

// showOne prints the answer as a one-row table.
func showOne(cols []column) func(printer, []byte, []string) error {
	return func(p printer, out []byte, _ []string) error { return p.one(out, cols) }
}

// showList prints the array at field as a table.
func showList(field string, cols []column) func(printer, []byte, []string) error {
	return func(p printer, out []byte, _ []string) error { return p.list(out, field, cols) }
}

// say prints a sentence made from the answer and the arguments.
func say(f func(v map[string]any, args []string) string) func(printer, []byte, []string) error {
	return func(p printer, out []byte, args []string) error {
		return p.sentence(out, func(v map[string]any) string { return f(v, args) })
	}
}

// showSecret prints a minted key alone on stdout (so $(...) captures it) and warns on stderr that it is shown once.
func (a *app) showSecret(out []byte) error {
	return a.printer().raw(out, func(v any) error {
		fmt.Fprintln(a.stderr, "Store this key now: it is not shown again.")
		_, err := fmt.Fprintln(a.stdout, cell(lookup(v, "api_key")))
		return err
	})
}
