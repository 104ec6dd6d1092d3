package cli

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func (a *app) loginCmd() *cobra.Command {
	var serverURL, key string
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Store the server URL and a workspace API key",
		Long: `login stores the server URL and a workspace API key in the user's config directory
(os.UserConfigDir()/modelgate/config: $XDG_CONFIG_HOME/modelgate/config or ~/.config/modelgate/config on Linux),
readable by the owner only (mode 0600). Every other command uses them; MODELGATE_URL and MODELGATE_API_KEY
override them.

The key is read from stdin (a prompt that does not echo it on a terminal) unless --api-key gives it; a key on
the command line stays in the shell's history. login checks that the URL answers GET /v1/spec; the key is
checked by the first command that uses it.`,
		Example: `  modelgate login --url http://127.0.0.1:8080            # prompts for the key
  printf '%s' "$KEY" | modelgate login --url https://gateway.example.com`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if serverURL == "" {
				serverURL = a.getenv(EnvURL)
			}
			serverURL = strings.TrimRight(serverURL, "/")
			if serverURL == "" {
				return usageErrorf("give --url (or set %s)", EnvURL)
			}
			if key == "" {
				var err error
				if key, err = a.readKey(); err != nil {
					return err
				}
			}
			if key == "" {
				return usageErrorf("no API key given")
			}
			c := &Client{BaseURL: serverURL, HTTP: &http.Client{Timeout: a.timeout}}
			if _, err := c.Do(cmd.Context(), Request{Method: http.MethodGet, Path: "/v1/spec"}); err != nil {
				return fmt.Errorf("%s does not answer as a modelgate server: %w", serverURL, err)
			}
			p, err := SaveConfig(Config{URL: serverURL, APIKey: key})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Logged in to %s; saved to %s\n", serverURL, p)
			return nil
		},
	}
	cmd.Flags().StringVar(&serverURL, "url", "", "gatewayd's base URL, e.g. http://127.0.0.1:8080 (default $MODELGATE_URL)")
	cmd.Flags().StringVar(&key, "api-key", "", "the workspace API key (default: read from stdin)")
	return cmd
}

// readKey reads the key from stdin: a prompt without echo on a terminal, else the first line.
func (a *app) readKey() (string, error) {
	if f, ok := a.stdin.(*os.File); ok && a.stdinTTY {
		fmt.Fprint(a.stderr, "API key: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", fmt.Errorf("failed to read the key: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && line == "" {
		return "", usageErrorf("no API key on stdin: give --api-key or pipe the key in")
	}
	return strings.TrimSpace(line), nil
}
