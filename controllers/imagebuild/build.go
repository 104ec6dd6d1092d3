package imagebuild

import (
	"archive/tar"
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Dockerfile is the name of the Dockerfile at the root of a build context.
const Dockerfile = "Dockerfile"

// Options configure a build.
type Options struct {
	// Pull reaches the base image's registry (keychain, guarded transport).
	Pull []remote.Option
	// Platform is the platform picked from a base image index. Defaults to linux/amd64.
	Platform *v1.Platform
	// TempDir holds the layer files of COPY while a build runs; os.TempDir() when empty.
	TempDir string
	// CheckBase returns why the base image's reference may not be pulled, nil when it may.
	CheckBase func(ref name.Reference) error
}

// Plan is a checked Dockerfile: the base and the steps, every instruction supported by the built-in builder.
type Plan struct {
	Base  string
	Steps []Instruction
	// args are the ARG defaults declared before FROM, for FROM's own expansion.
	args map[string]string
}

// PlanDockerfile parses src and refuses what the built-in builder cannot do: RUN and several stages (naming the
// BuildKit backend), COPY --from, ADD of a URL or an archive to unpack, and any other instruction.
func PlanDockerfile(src string) (*Plan, error) {
	ins, err := Parse(src)
	if err != nil {
		return nil, err
	}
	p := &Plan{args: map[string]string{}}
	for _, in := range ins {
		switch in.Cmd {
		case "ARG":
			if p.Base == "" {
				kvs, err := keyValues(in.Args, false)
				if err != nil {
					return nil, refuse("Dockerfile line %d: ARG %v.", in.Line, err)
				}
				for _, kv := range kvs {
					p.args[kv[0]] = kv[1]
				}
				continue
			}
			p.Steps = append(p.Steps, in)
		case "FROM":
			if p.Base != "" {
				return nil, buildKitRefusal("Dockerfile line %d: a second FROM starts another stage; multi-stage builds are not supported by the built-in builder.", in.Line)
			}
			words := strings.Fields(in.Args)
			if len(words) == 0 {
				return nil, refuse("Dockerfile line %d: FROM needs an image.", in.Line)
			}
			p.Base = expand(words[0], p.args)
		case "RUN":
			return nil, buildKitRefusal("Dockerfile line %d: RUN executes commands in the image, which the built-in builder cannot do.", in.Line)
		case "COPY", "ADD":
			for _, f := range in.Flags {
				if strings.HasPrefix(f, "--from") {
					return nil, buildKitRefusal("Dockerfile line %d: %s --from copies from another stage or image.", in.Line, in.Cmd)
				}
			}
			if in.Cmd == "ADD" && (strings.Contains(in.Args, "://") || strings.Contains(in.Args, "git@")) {
				return nil, refuse("Dockerfile line %d: ADD of a URL is not supported; put the file in the context and COPY it.", in.Line)
			}
			fallthrough
		case "ENV", "WORKDIR", "CMD", "ENTRYPOINT", "LABEL", "EXPOSE", "USER":
			if p.Base == "" {
				return nil, refuse("Dockerfile line %d: %s comes before FROM.", in.Line, in.Cmd)
			}
			p.Steps = append(p.Steps, in)
		default:
			return nil, buildKitRefusal("Dockerfile line %d: %s is not supported by the built-in builder.", in.Line, in.Cmd)
		}
	}
	if p.Base == "" {
		return nil, refuse("The Dockerfile has no FROM.")
	}
	if strings.EqualFold(p.Base, "scratch") {
		p.Base = "scratch"
	}
	return p, nil
}

// Build builds the image the context's Dockerfile describes. zr is the uploaded ZIP.
func Build(ctx context.Context, zr *zip.Reader, opts Options) (v1.Image, error) {
	c, err := CheckContext(zr)
	if err != nil {
		return nil, err
	}
	df, ok := c.File(Dockerfile)
	if !ok {
		return nil, refuse("The build context has no Dockerfile at its root.")
	}
	src, err := readAll(df, 1<<20)
	if err != nil {
		return nil, refuse("The Dockerfile cannot be read: %v.", err)
	}
	plan, err := PlanDockerfile(src)
	if err != nil {
		return nil, err
	}
	img, err := base(ctx, plan.Base, opts)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("failed to read the base image's config: %w", err)
	}
	cfg := *cf.Config.DeepCopy()
	vars := map[string]string{}
	for k, v := range plan.args {
		vars[k] = v
	}
	for _, e := range cfg.Env {
		k, v, _ := strings.Cut(e, "=")
		vars[k] = v
	}
	cmdSet := false
	for _, in := range plan.Steps {
		args := in.Args
		switch in.Cmd {
		case "ARG":
			kvs, err := keyValues(args, false)
			if err != nil {
				return nil, refuse("Dockerfile line %d: ARG %v.", in.Line, err)
			}
			for _, kv := range kvs {
				if _, set := vars[kv[0]]; !set || kv[1] != "" {
					vars[kv[0]] = expand(kv[1], vars)
				}
			}
		case "ENV":
			kvs, err := keyValues(args, true)
			if err != nil {
				return nil, refuse("Dockerfile line %d: ENV %v.", in.Line, err)
			}
			for _, kv := range kvs {
				v := expand(kv[1], vars)
				vars[kv[0]] = v
				cfg.Env = setEnv(cfg.Env, kv[0], v)
			}
		case "LABEL":
			kvs, err := keyValues(args, false)
			if err != nil {
				return nil, refuse("Dockerfile line %d: LABEL %v.", in.Line, err)
			}
			if cfg.Labels == nil {
				cfg.Labels = map[string]string{}
			}
			for _, kv := range kvs {
				cfg.Labels[kv[0]] = expand(kv[1], vars)
			}
		case "WORKDIR":
			dir := expand(args, vars)
			if !path.IsAbs(dir) {
				dir = path.Join(orRoot(cfg.WorkingDir), dir)
			}
			cfg.WorkingDir = path.Clean(dir)
		case "USER":
			cfg.User = expand(args, vars)
		case "EXPOSE":
			if cfg.ExposedPorts == nil {
				cfg.ExposedPorts = map[string]struct{}{}
			}
			for _, p := range strings.Fields(expand(args, vars)) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				cfg.ExposedPorts[p] = struct{}{}
			}
		case "CMD":
			cfg.Cmd, cmdSet = execForm(args), true
		case "ENTRYPOINT":
			cfg.Entrypoint = execForm(args)
			if !cmdSet {
				// Docker resets an inherited CMD when the Dockerfile sets ENTRYPOINT.
				cfg.Cmd = nil
			}
		case "COPY", "ADD":
			layer, err := copyLayer(c, in, vars, cfg.WorkingDir, opts.TempDir)
			if err != nil {
				return nil, err
			}
			if img, err = mutate.AppendLayers(img, layer); err != nil {
				return nil, fmt.Errorf("failed to add the layer of line %d: %w", in.Line, err)
			}
		}
	}
	return mutate.Config(img, cfg)
}

func orRoot(dir string) string {
	if dir == "" {
		return "/"
	}
	return dir
}

func setEnv(env []string, k, v string) []string {
	for i, e := range env {
		if name, _, _ := strings.Cut(e, "="); name == k {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

// base pulls the FROM image, the configured platform of an index.
func base(ctx context.Context, ref string, opts Options) (v1.Image, error) {
	if ref == "scratch" {
		return mutate.ConfigFile(emptyImage(), &v1.ConfigFile{OS: "linux", Architecture: "amd64"})
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, refuse("FROM %q is not an image reference.", ref)
	}
	if opts.CheckBase != nil {
		if err := opts.CheckBase(r); err != nil {
			return nil, refuse("FROM %q %v.", ref, err)
		}
	}
	platform := opts.Platform
	if platform == nil {
		platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
	}
	img, err := remote.Image(r, append(append([]remote.Option{}, opts.Pull...), remote.WithContext(ctx), remote.WithPlatform(*platform))...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, refuse("FROM %q cannot be pulled: %v.", ref, err)
	}
	return img, nil
}

// copyLayer writes the files one COPY or ADD selects into a tar layer file, below its destination.
func copyLayer(c *Context, in Instruction, vars map[string]string, workdir, tempDir string) (v1.Layer, error) {
	var words []string
	if strings.HasPrefix(in.Args, "[") {
		words = execForm(in.Args)
	} else {
		var err error
		if words, err = splitWords(in.Args); err != nil {
			return nil, refuse("Dockerfile line %d: %s %v.", in.Line, in.Cmd, err)
		}
	}
	if len(words) < 2 {
		return nil, refuse("Dockerfile line %d: %s needs a source and a destination.", in.Line, in.Cmd)
	}
	uid, gid := 0, 0
	for _, f := range in.Flags {
		if v, ok := strings.CutPrefix(f, "--chown="); ok {
			u, g, _ := strings.Cut(v, ":")
			if _, err := fmt.Sscanf(u, "%d", &uid); err != nil {
				return nil, refuse("Dockerfile line %d: --chown takes numeric ids with the built-in builder.", in.Line)
			}
			gid = uid
			if g != "" {
				if _, err := fmt.Sscanf(g, "%d", &gid); err != nil {
					return nil, refuse("Dockerfile line %d: --chown takes numeric ids with the built-in builder.", in.Line)
				}
			}
		}
	}
	dest := expand(words[len(words)-1], vars)
	srcs := words[:len(words)-1]
	// A destination ending in '/' (or '.', the working directory) is a directory, as is any with several sources.
	toDir := strings.HasSuffix(dest, "/") || dest == "." || strings.HasSuffix(dest, "/.") || len(srcs) > 1
	if !path.IsAbs(dest) {
		dest = path.Join(orRoot(workdir), dest)
	}
	var entries [][2]string // context path, image path
	for _, s := range srcs {
		m, err := c.Match(expand(s, vars))
		if err != nil {
			return nil, refuse("Dockerfile line %d: %s source %q is not a valid pattern.", in.Line, in.Cmd, s)
		}
		if len(m) == 0 {
			return nil, refuse("Dockerfile line %d: %s source %q matches nothing in the build context.", in.Line, in.Cmd, s)
		}
		_, single := c.File(strings.TrimPrefix(path.Clean("/"+expand(s, vars)), "/"))
		for _, e := range m {
			target := path.Join(dest, e[1])
			if single && len(m) == 1 && !toDir && !c.isDir(e[0]) {
				target = dest
			}
			entries = append(entries, [2]string{e[0], target})
		}
	}
	f, err := os.CreateTemp(tempDir, "layer-*.tar")
	if err != nil {
		return nil, fmt.Errorf("failed to create a layer file: %w", err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, e := range entries {
		if err := writeEntry(tw, c.files[e[0]], strings.TrimPrefix(e[1], "/"), uid, gid); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("failed to write a layer: %w", err)
	}
	name := f.Name()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(name) })
}

func (c *Context) isDir(p string) bool {
	f, ok := c.files[p]
	return ok && f.FileInfo().IsDir()
}

func writeEntry(tw *tar.Writer, f *zip.File, target string, uid, gid int) error {
	mode := f.Mode()
	hdr := &tar.Header{Name: target, Uid: uid, Gid: gid, ModTime: f.Modified, Mode: int64(mode.Perm())}
	if hdr.Mode == 0 {
		hdr.Mode = 0o644
	}
	if mode&fs.ModeSymlink != 0 {
		t, err := readAll(f, maxSymlinkTarget)
		if err != nil {
			return refuse("The build context symlink %q cannot be read: %v.", f.Name, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, t
		return tw.WriteHeader(hdr)
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, int64(f.UncompressedSize64)
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	rc, err := f.Open()
	if err != nil {
		return refuse("The build context entry %q cannot be read: %v.", f.Name, err)
	}
	defer rc.Close()
	n, err := io.Copy(tw, rc)
	if err != nil || n != hdr.Size {
		return refuse("The build context entry %q is corrupt: %v.", f.Name, errors.Join(err, fmt.Errorf("read %d of %d bytes", n, hdr.Size)))
	}
	return nil
}
