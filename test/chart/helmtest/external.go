package helmtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// ExternalCRD is a CustomResourceDefinition of another project that the chart can render objects of, taken from
// that project's Go module at a pinned version.
type ExternalCRD struct {
	Module string   // module@version, fetched through the Go module proxy into the module cache
	File   string   // path of the CRD inside the module
	Kinds  []string // the kinds it serves that the chart renders
}

// ExternalCRDs are the CRDs the chart's optional parts need. They are not dependencies of the product, so they
// stay out of go.mod: `go mod download` puts each module in the module cache once, and later runs reuse it.
var ExternalCRDs = []ExternalCRD{
	{"github.com/cert-manager/cert-manager@v1.21.2", "deploy/crds/cert-manager.io_certificates.yaml", []string{"Certificate"}},
	{"github.com/cert-manager/cert-manager@v1.21.2", "deploy/crds/cert-manager.io_issuers.yaml", []string{"Issuer"}},
	{"github.com/cert-manager/cert-manager@v1.21.2", "deploy/crds/cert-manager.io_clusterissuers.yaml", []string{"ClusterIssuer"}},
	{"github.com/prometheus-operator/prometheus-operator@v0.85.0", "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml", []string{"ServiceMonitor"}},
	{"github.com/prometheus-operator/prometheus-operator@v0.85.0", "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml", []string{"PrometheusRule"}},
	// v1.6.3 rather than the newest: v1.7.0's go.mod asks for a newer Go than the project builds with, and the
	// go command refuses to download it.
	{"sigs.k8s.io/gateway-api@v1.6.3", "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml", []string{"HTTPRoute"}},
}

var (
	moduleDirsMu sync.Mutex
	moduleDirs   = map[string]string{}
)

// ExternalCRDFiles downloads the modules of ExternalCRDs and returns the paths of their CRD files, and the
// kinds it could not provide with the reason (a module the proxy does not serve, a file a module lacks), so that
// a test can skip exactly those kinds and say why.
func ExternalCRDFiles(t testing.TB) (files []string, missing map[string]error) {
	t.Helper()
	missing = map[string]error{}
	for _, c := range ExternalCRDs {
		dir, err := moduleDir(t, c.Module)
		if err == nil {
			path := filepath.Join(dir, filepath.FromSlash(c.File))
			if _, err = os.Stat(path); err == nil {
				files = append(files, path)
				continue
			}
		}
		for _, k := range c.Kinds {
			missing[k] = err
		}
	}
	return files, missing
}

// moduleDir returns the module cache directory of module@version, downloading it when needed.
func moduleDir(t testing.TB, module string) (string, error) {
	moduleDirsMu.Lock()
	defer moduleDirsMu.Unlock()
	if dir, ok := moduleDirs[module]; ok {
		return dir, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("failed to find the go command: %w", err)
	}
	// Run outside the repository, so that the download neither reads nor touches go.mod.
	cmd := exec.Command(goBin, "mod", "download", "-json", module)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	out, runErr := cmd.Output()
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %v: %w", module, runErr, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", module, info.Error)
	}
	moduleDirs[module] = info.Dir
	return info.Dir, nil
}
