package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images the cluster runs, all local: containerd imports them, and pods use imagePullPolicy Never, so nothing
// is ever pulled.
const (
	// ImageRepository and ImageTag are the product's image, as the chart's image.repository and image.tag.
	ImageRepository = "modelgate.local/modelgate"
	ImageTag        = "cluster"
	// DemoModelImage serves the demo model (cmd/demo-model) on :8080.
	DemoModelImage = "modelgate.local/demo-model:cluster"
	// DemoUpstreamImage serves the demo OpenAI-compatible upstream (cmd/demo-upstream) on :8080, base URL /v1.
	DemoUpstreamImage = "modelgate.local/demo-upstream:cluster"
	// PauseImage holds each pod's network namespace: a static program that sleeps until it is stopped.
	PauseImage = "modelgate.local/pause:cluster"
)

// nonroot is the user the Dockerfile's base image runs as (distroless/static:nonroot): USER 65532:65532.
const nonroot = "65532:65532"

// imageSpec is one image built the way ko builds one: static Go binaries in a single layer on an empty base, plus
// the few files a distroless base would bring (CA certificates, a passwd entry for the user, a writable /tmp).
type imageSpec struct {
	ref        string
	entrypoint []string
	user       string
	// binaries maps a Go package (./cmd/manager) to its path in the image (/manager).
	binaries map[string]string
}

func productImages() []imageSpec {
	return []imageSpec{
		{
			ref:        ImageRepository + ":" + ImageTag,
			entrypoint: []string{"/manager"},
			user:       nonroot,
			binaries:   map[string]string{"./cmd/manager": "/manager", "./cmd/gatewayd": "/gatewayd"},
		},
		{
			ref:        DemoModelImage,
			entrypoint: []string{"/demo-model", "--addr=:8080"},
			user:       nonroot,
			binaries:   map[string]string{"./cmd/demo-model": "/demo-model"},
		},
		{
			ref:        DemoUpstreamImage,
			entrypoint: []string{"/demo-upstream", "--addr=:8080"},
			user:       nonroot,
			binaries:   map[string]string{"./cmd/demo-upstream": "/demo-upstream"},
		},
		{
			ref:        PauseImage,
			entrypoint: []string{"/pause"},
			user:       "65535:65535",
			binaries:   map[string]string{"./test/cluster/pause": "/pause"},
		},
	}
}

// BuildImages compiles the images' binaries from the repository at root (CGO_ENABLED=0, -trimpath, as the
// Dockerfile's build stage does) and writes each image as a docker-archive tarball in dir. It answers the
// tarballs' paths.
func BuildImages(ctx context.Context, root, dir string) ([]string, error) {
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	var pkgs []string
	for _, spec := range productImages() {
		for pkg := range spec.binaries {
			pkgs = append(pkgs, pkg)
		}
	}
	build := exec.CommandContext(ctx, "go", append([]string{"build", "-trimpath", "-ldflags",
		"-s -w -X github.com/modelgate/modelgate/gatewayd/version.Version=cluster", "-o", binDir + "/"}, pkgs...)...)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("failed to build the images' binaries: %w: %s", err, out)
	}
	var paths []string
	for _, spec := range productImages() {
		img, err := spec.image(binDir)
		if err != nil {
			return nil, fmt.Errorf("failed to build image %s: %w", spec.ref, err)
		}
		tag, err := name.NewTag(spec.ref)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(spec.ref)+".tar")
		if err := tarball.WriteToFile(path, tag, img); err != nil {
			return nil, fmt.Errorf("failed to write image %s: %w", spec.ref, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func (s imageSpec) image(binDir string) (v1.Image, error) {
	var files []layerFile
	for pkg, dst := range s.binaries {
		b, err := os.ReadFile(filepath.Join(binDir, filepath.Base(pkg)))
		if err != nil {
			return nil, err
		}
		files = append(files, layerFile{path: dst, mode: 0o755, data: b})
	}
	uid, gid, _ := strings.Cut(s.user, ":")
	files = append(files,
		layerFile{path: "/etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + uid + ":" + gid + ":nonroot:/home/nonroot:/sbin/nologin\n")},
		layerFile{path: "/etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:" + gid + ":\n")},
		layerFile{path: "/tmp", mode: 0o1777, dir: true},
	)
	if certs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files = append(files, layerFile{path: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: certs})
	}
	layerBytes, err := tarLayer(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Created = v1.Time{Time: time.Unix(0, 0)}
	cfg.Config.Entrypoint = s.entrypoint
	cfg.Config.User = s.user
	cfg.Config.Env = []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	return mutate.ConfigFile(img, cfg)
}

type layerFile struct {
	path string
	mode int64
	data []byte
	dir  bool
}

// tarLayer writes files, with their parent directories, as one layer; times are zero so the digest depends only
// on the content, as ko's layers do.
func tarLayer(files []layerFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	written := map[string]bool{}
	for _, f := range files {
		rel := strings.TrimPrefix(f.path, "/")
		var parents []string
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if written[d] {
				continue
			}
			written[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		if f.dir {
			if err := tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: f.mode, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: f.mode, Size: int64(len(f.data)), Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
