// Command modelgate is the command-line client of the /v1 REST API and the model routes (docs/rest-api.md).
// Everything but the process exit lives in internal/cli.
package main

import (
	"os"

	"github.com/modelgate/modelgate/cmd/modelgate/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
