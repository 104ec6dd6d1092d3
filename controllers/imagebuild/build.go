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
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/modelgate/modelgate/api/sandbox"
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
	Steps []Step
	// metaArgs are the ARG defaults declared before FROM: FROM is expanded in them, and an ARG of the stage that
	// names one without a value takes it, as in Docker.
	metaArgs vars
	lex      *shell.Lex
}

// PlanDockerfile reads src with BuildKit's parser and instruction reader, which refuse what Docker refuses (an
// unknown flag, a malformed instruction), and then refuses what the built-in builder cannot do: RUN and several
// stages (naming the BuildKit backend), COPY --from, ADD of a URL, flags it does not apply, and any other
// instruction. A CMD or ENTRYPOINT that opens a JSON array but is not one is refused too: Docker would run the
// text as a shell command, which is never what was meant.
func PlanDockerfile(src string) (*Plan, error) {
	res, err := parser.Parse(strings.NewReader(src))
	if err != nil {
		if strings.TrimSpace(src) == "" {
			return nil, refuse("The Dockerfile is empty.")
		}
		var loc *parser.LocationError
		if errors.As(err, &loc) && len(loc.Locations) > 0 && len(loc.Locations[0]) > 0 {
			line := loc.Locations[0][0].Start.Line
			if lines := strings.Split(src, "\n"); line >= 1 && line <= len(lines) {
				name, _, _ := strings.Cut(strings.TrimSpace(lines[line-1]), " ")
				return nil, lineError(line, strings.ToUpper(name), "is not valid: %v.", loc.Unwrap())
			}
		}
		return nil, refuse("The Dockerfile cannot be read: %v.", err)
	}
	p := &Plan{metaArgs: vars{}, lex: shell.NewLex(res.EscapeToken)}
	for _, n := range res.AST.Children {
		name, line := strings.ToUpper(n.Value), n.StartLine
		v, err := instructions.ParseInstruction(n)
		if err != nil {
			return nil, lineError(line, name, "is not valid: %v.", err)
		}
		if stage, ok := v.(*instructions.Stage); ok {
			if p.Base != "" {
				return nil, buildKitRefusal("Dockerfile line %d: a second FROM starts another stage; multi-stage builds are not supported by the built-in builder.", line)
			}
			if p.Base, _, err = p.lex.ProcessWord(stage.BaseName, p.metaArgs); err != nil {
				return nil, lineError(line, name, "cannot be expanded: %v.", err)
			}
			if p.Base == "" {
				return nil, lineError(line, name, "names no image.")
			}
			continue
		}
		if arg, ok := v.(*instructions.ArgCommand); ok && p.Base == "" {
			for _, kv := range arg.Args {
				if kv.Value == nil {
					continue
				}
				if p.metaArgs[kv.Key], _, err = p.lex.ProcessWord(*kv.Value, p.metaArgs); err != nil {
					return nil, lineError(line, name, "cannot be expanded: %v.", err)
				}
			}
			continue
		}
		if err := supported(v, name, line); err != nil {
			return nil, err
		}
		if p.Base == "" {
			return nil, refuse("Dockerfile line %d: %s comes before FROM.", line, name)
		}
		p.Steps = append(p.Steps, Step{Cmd: name, Line: line, Command: v.(instructions.Command)})
	}
	if p.Base == "" {
		return nil, refuse("The Dockerfile has no FROM.")
	}
	if strings.EqualFold(p.Base, "scratch") {
		p.Base = "scratch"
	}
	return p, nil
}

// supported refuses an instruction, or a form of one, that the built-in builder does not apply.
func supported(v any, name string, line int) error {
	unsupportedFlag := func(flag string) error {
		return buildKitRefusal("Dockerfile line %d: %s %s is not supported by the built-in builder.", line, name, flag)
	}
	switch c := v.(type) {
	case *instructions.RunCommand:
		return buildKitRefusal("Dockerfile line %d: RUN executes commands in the image, which the built-in builder cannot do.", line)
	case *instructions.CopyCommand:
		switch {
		case c.From != "":
			return buildKitRefusal("Dockerfile line %d: COPY --from copies from another stage or image.", line)
		case c.Parents:
			return unsupportedFlag("--parents")
		}
		return copyFlags(c.Chmod, c.Link, c.ExcludePatterns, c.SourceContents, unsupportedFlag)
	case *instructions.AddCommand:
		for _, s := range c.SourcePaths {
			if strings.Contains(s, "://") || strings.Contains(s, "git@") {
				return refuse("Dockerfile line %d: ADD of a URL is not supported; put the file in the context and COPY it.", line)
			}
		}
		switch {
		case c.Checksum != "":
			return unsupportedFlag("--checksum")
		case c.KeepGitDir != nil:
			return unsupportedFlag("--keep-git-dir")
		case c.Unpack != nil:
			return unsupportedFlag("--unpack")
		}
		return copyFlags(c.Chmod, c.Link, c.ExcludePatterns, c.SourceContents, unsupportedFlag)
	case *instructions.CmdCommand:
		return execFormChecked(c.ShellDependantCmdLine, name, line)
	case *instructions.EntrypointCommand:
		return execFormChecked(c.ShellDependantCmdLine, name, line)
	case *instructions.ArgCommand, *instructions.EnvCommand, *instructions.WorkdirCommand, *instructions.LabelCommand,
		*instructions.ExposeCommand, *instructions.UserCommand:
	default:
		return buildKitRefusal("Dockerfile line %d: %s is not supported by the built-in builder.", line, name)
	}
	return nil
}

// copyFlags refuses the flags COPY and ADD share that the built-in builder does not apply.
func copyFlags(chmod string, link bool, exclude []string, contents []instructions.SourceContent, unsupported func(string) error) error {
	switch {
	case chmod != "":
		return unsupported("--chmod")
	case link:
		return unsupported("--link")
	case len(exclude) > 0:
		return unsupported("--exclude")
	case len(contents) > 0:
		return unsupported("of a here-document")
	}
	return nil
}

// execFormChecked refuses a shell form that opens a JSON array: a broken exec form such as CMD ["a".
func execFormChecked(c instructions.ShellDependantCmdLine, name string, line int) error {
	if len(c.Files) > 0 {
		return buildKitRefusal("Dockerfile line %d: %s of a here-document is not supported by the built-in builder.", line, name)
	}
	if c.PrependShell && strings.HasPrefix(strings.TrimSpace(strings.Join(c.CmdLine, " ")), "[") {
		return lineError(line, name, "is not a valid exec form: it opens a JSON array but is not one (write [\"executable\", \"arg\"] with double quotes).")
	}
	return nil
}

// command is the argv of CMD or ENTRYPOINT: the exec form as written, or the shell form under /bin/sh -c.
func command(c instructions.ShellDependantCmdLine) []string {
	if c.PrependShell {
		return []string{"/bin/sh", "-c", strings.Join(c.CmdLine, " ")}
	}
	return append([]string(nil), c.CmdLine...)
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
	env := vars{}
	for _, e := range cfg.Env {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	cmdSet := false
	for _, st := range plan.Steps {
		if ex, ok := st.Command.(instructions.SupportsSingleWordExpansion); ok {
			if err := ex.Expand(expander(plan.lex, env)); err != nil {
				return nil, lineError(st.Line, st.Cmd, "cannot be expanded: %v.", err)
			}
		}
		switch in := st.Command.(type) {
		case *instructions.ArgCommand:
			for _, kv := range in.Args {
				if kv.Value != nil {
					env[kv.Key] = *kv.Value
				} else if v, ok := plan.metaArgs[kv.Key]; ok {
					env[kv.Key] = v
				}
			}
		case *instructions.EnvCommand:
			for _, kv := range in.Env {
				env[kv.Key] = kv.Value
				cfg.Env = setEnv(cfg.Env, kv.Key, kv.Value)
			}
		case *instructions.LabelCommand:
			if cfg.Labels == nil {
				cfg.Labels = map[string]string{}
			}
			for _, kv := range in.Labels {
				cfg.Labels[kv.Key] = kv.Value
			}
		case *instructions.WorkdirCommand:
			dir := in.Path
			if !path.IsAbs(dir) {
				dir = path.Join(orRoot(cfg.WorkingDir), dir)
			}
			cfg.WorkingDir = path.Clean(dir)
		case *instructions.UserCommand:
			cfg.User = in.User
		case *instructions.ExposeCommand:
			var words []string
			for _, p := range in.Ports {
				w, err := plan.lex.ProcessWords(p, env)
				if err != nil {
					return nil, lineError(st.Line, st.Cmd, "cannot be expanded: %v.", err)
				}
				words = append(words, w...)
			}
			ps, err := ports(words)
			if err != nil {
				return nil, lineError(st.Line, st.Cmd, "%v.", err)
			}
			if cfg.ExposedPorts == nil {
				cfg.ExposedPorts = map[string]struct{}{}
			}
			for _, p := range ps {
				cfg.ExposedPorts[p] = struct{}{}
			}
		case *instructions.CmdCommand:
			cfg.Cmd, cmdSet = command(in.ShellDependantCmdLine), true
		case *instructions.EntrypointCommand:
			cfg.Entrypoint = command(in.ShellDependantCmdLine)
			if !cmdSet {
				// Docker resets an inherited CMD when the Dockerfile sets ENTRYPOINT.
				cfg.Cmd = nil
			}
		case *instructions.CopyCommand:
			if img, err = addLayer(img, c, st, in.SourcesAndDest, in.Chown, cfg.WorkingDir, opts.TempDir); err != nil {
				return nil, err
			}
		case *instructions.AddCommand:
			if img, err = addLayer(img, c, st, in.SourcesAndDest, in.Chown, cfg.WorkingDir, opts.TempDir); err != nil {
				return nil, err
			}
		}
	}
	return mutate.Config(img, cfg)
}

// addLayer appends the layer of one COPY or ADD.
func addLayer(img v1.Image, c *Context, st Step, sd instructions.SourcesAndDest, chown, workdir, tempDir string) (v1.Image, error) {
	layer, err := copyLayer(c, st, sd, chown, workdir, tempDir)
	if err != nil {
		return nil, err
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, fmt.Errorf("failed to add the layer of line %d: %w", st.Line, err)
	}
	return img, nil
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
	r, err := sandbox.ParseReference(ref)
	if err != nil {
		return nil, refuse("FROM %q %v.", ref, err)
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

// copyLayer writes the files one COPY or ADD selects (its words already expanded) into a tar layer file, below
// its destination.
func copyLayer(c *Context, st Step, sd instructions.SourcesAndDest, chown, workdir, tempDir string) (v1.Layer, error) {
	uid, gid := 0, 0
	if chown != "" {
		u, g, _ := strings.Cut(chown, ":")
		var err error
		if uid, err = strconv.Atoi(u); err != nil {
			return nil, refuse("Dockerfile line %d: --chown takes numeric ids with the built-in builder.", st.Line)
		}
		gid = uid
		if g != "" {
			if gid, err = strconv.Atoi(g); err != nil {
				return nil, refuse("Dockerfile line %d: --chown takes numeric ids with the built-in builder.", st.Line)
			}
		}
	}
	dest, srcs := sd.DestPath, sd.SourcePaths
	if len(srcs) == 0 || dest == "" {
		return nil, refuse("Dockerfile line %d: %s needs a source and a destination.", st.Line, st.Cmd)
	}
	// A destination ending in '/' (or '.', the working directory) is a directory, as is any with several sources.
	toDir := strings.HasSuffix(dest, "/") || dest == "." || strings.HasSuffix(dest, "/.") || len(srcs) > 1
	if !path.IsAbs(dest) {
		dest = path.Join(orRoot(workdir), dest)
	}
	var entries [][2]string // context path, image path
	for _, s := range srcs {
		m, err := c.Match(s)
		if err != nil {
			return nil, refuse("Dockerfile line %d: %s source %q is not a valid pattern.", st.Line, st.Cmd, s)
		}
		if len(m) == 0 {
			return nil, refuse("Dockerfile line %d: %s source %q matches nothing in the build context.", st.Line, st.Cmd, s)
		}
		_, single := c.File(strings.TrimPrefix(path.Clean("/"+s), "/"))
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
