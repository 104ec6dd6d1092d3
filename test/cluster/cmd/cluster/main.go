// Command cluster is `make cluster`: it builds the product's images, brings up the one-node cluster (package
// test/cluster), installs the Helm chart on it, seeds the workspace as `make run` does, writes .dev/cluster.env,
// and keeps everything up until Ctrl-C, when it removes everything it made. `cluster -cleanup` removes a cluster
// that a killed run left behind.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/modelgate/modelgate/test/cluster"
	"github.com/modelgate/modelgate/test/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run() error {
	binDir := flag.String("bin-dir", os.Getenv("MODELGATE_CLUSTER_BIN"), "Directory of the cluster's binaries (hack/envtest-binaries.sh cluster prints it).")
	helm := flag.String("helm", "bin/helm", "The helm binary.")
	cleanup := flag.Bool("cleanup", false, "Only remove a cluster a killed run left behind, then exit.")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if *cleanup {
		return cluster.Cleanup(os.Stderr)
	}
	root, err := stack.FindRoot()
	if err != nil {
		return err
	}
	if *helm, err = filepath.Abs(*helm); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	imageDir := filepath.Join(cacheDir(), "cluster-images")
	fmt.Fprintln(os.Stderr, "cluster: building the images (static binaries on an empty base)")
	images, err := cluster.BuildImages(ctx, root, imageDir)
	if err != nil {
		return err
	}
	c, err := cluster.Up(ctx, cluster.Options{BinDir: *binDir, Images: images, Log: os.Stderr})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "cluster: removing the cluster")
		if err := c.Down(); err != nil {
			fmt.Fprintln(os.Stderr, "cluster: teardown:", err)
		}
	}()
	p, err := c.Install(ctx, cluster.InstallOptions{Root: root, Helm: *helm})
	if err != nil {
		return err
	}
	defer p.Stop()
	envPath := filepath.Join(root, ".dev", "cluster.env")
	if err := writeEnv(envPath, c, p, *binDir); err != nil {
		return err
	}
	fmt.Printf(`
modelgate is installed on a one-node cluster (helm install took %s).

  Every address lives in network namespace %s. Run any client there:
    hack/cluster.sh exec -- curl -s "$MODELGATE_URL/v1/models" -H "Authorization: Bearer $MODELGATE_API_KEY"
    hack/cluster.sh exec -- kubectl get pods -A
    hack/cluster.sh exec -- bash          # a shell with %s sourced

  gatewayd's Service: %s     a client may listen on %s (MODELGATE_CLIENT_ADDR)
  Component logs: %s/logs

Ctrl-C removes the cluster and everything it made.
`, p.InstallDuration.Round(1e9), cluster.NetnsName, envPath, p.GatewayURL, cluster.ClientIP, c.Dir)
	select {
	case <-ctx.Done():
		return nil
	case err := <-c.Failed():
		return err
	}
}

func writeEnv(path string, c *cluster.Cluster, p *cluster.Product, binDir string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	lines := []string{
		"# Written by make cluster; hack/cluster.sh exec sources it inside the cluster's network namespace.",
		"export MODELGATE_URL=" + p.GatewayURL,
		"export MODELGATE_API_KEY=" + p.APIKey,
		"export KUBECONFIG=" + c.AdminKubeconfig,
		"export MODELGATE_NAMESPACE=" + cluster.WorkspaceNamespace,
		"export MODELGATE_CLIENT_ADDR=" + cluster.ClientIP,
		"export MODELGATE_REGISTRY=" + p.RegistryHost,
		`export PATH="` + binDir + `:$PATH"`,
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

func cacheDir() string {
	if d := os.Getenv("MODELGATE_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return os.TempDir()
	}
	return filepath.Join(home, ".cache", "modelgate")
}
