package cli

import (
	"archive/zip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
)

var imageColumns = []column{
	{"NAME", "name"}, {"STATUS", "status"}, {"IMAGE REF", "image_ref"}, {"TAGS", "tags"}, {"UPDATED", "updated_at"}, {"ERROR", "error"},
}

func (a *app) imagesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Sandbox images: push, get",
		Long: `Sandbox images (/v1/sandboxes/images), pushed into the workspace registry for a team. --team names the
team (X-Team-Id); it may be left out when the key reaches only one team. The manager imports or builds the image
and assigns its tags (v1, v2, ..., latest); 'images get' shows the latest push's status.`,
		Example: "  modelgate images push busybox --image docker.io/library/busybox:1.36 --team red\n  modelgate images get busybox --team red",
	}
	var team, image, dockerConfig, dir string
	push := &cobra.Command{
		Use:   "push NAME (--image REF | --dir DIR)",
		Short: "Import an image from a registry, or build one from a directory",
		Long: `push imports an image from a registry reference (--image, with --docker-config for a private
registry), or zips a directory that holds a Dockerfile at its root (--dir) and uploads it to the signed upload URL
the server answers, with a progress bar when stderr is a terminal. The build runs in the manager: follow it with
'modelgate images get NAME'.`,
		Example: `  modelgate images push busybox --image docker.io/library/busybox:1.36 --team red
  modelgate images push private/app --image registry.example.com/app:1 --docker-config ~/.docker/config.json
  modelgate images push agent --dir ./agent --team red`,
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			which, err := oneOf(cmd, true, "image", "dir")
			if err != nil {
				return err
			}
			body := map[string]any{"name": args[0]}
			var archive *os.File
			if which == "image" {
				body["image"] = image
				if dockerConfig != "" {
					b, err := os.ReadFile(dockerConfig)
					if err != nil {
						return fmt.Errorf("failed to read %s: %w", dockerConfig, err)
					}
					body["docker_config"] = string(b)
				}
			} else {
				if dockerConfig != "" {
					return usageErrorf("--docker-config goes with --image")
				}
				// Zip first: a directory that cannot be read fails before the server records a push.
				if archive, err = zipDir(dir); err != nil {
					return err
				}
				defer os.Remove(archive.Name())
				defer archive.Close()
			}
			raw, _ := json.Marshal(body)
			out, err := a.call(cmd.Context(), Request{Method: http.MethodPost, Path: "/v1/sandboxes/images", Body: raw, Header: teamHeader(team)})
			if err != nil {
				return err
			}
			if archive == nil {
				return a.printer().one(out, []column{{"NAME", "name"}, {"STATUS", "status"}, {"REPOSITORY", "repository"}})
			}
			var pushed struct {
				UploadURL string `json:"upload_url"`
			}
			if err := json.Unmarshal(out, &pushed); err != nil || pushed.UploadURL == "" {
				return fmt.Errorf("the server answered no upload_url: %s", out)
			}
			// An upload may take longer than a call: only a --timeout given for it bounds it.
			var timeout time.Duration
			if cmd.Flags().Changed("timeout") {
				timeout = a.timeout
			}
			up, err := a.upload(cmd.Context(), pushed.UploadURL, archive, timeout)
			if err != nil {
				return err
			}
			return a.printer().one(up, []column{{"NAME", "name"}, {"BUILD", "build"}, {"STATUS", "status"}, {"CONTEXT DIGEST", "context_digest"}})
		},
	}
	pf := push.Flags()
	pf.StringVar(&image, "image", "", "the registry reference to import, e.g. docker.io/library/busybox:1.36")
	pf.StringVar(&dockerConfig, "docker-config", "", "a docker config JSON file with the credentials for --image")
	pf.StringVar(&dir, "dir", "", "a directory with a Dockerfile at its root, zipped and uploaded")
	_ = push.MarkFlagDirname("dir")

	get := a.command(verb{
		use: "get NAME", short: "Show a sandbox image: the latest push's status and the tags",
		example: "  modelgate images get busybox --team red\n  modelgate images get agent -o json | jq -r .status",
		args:    []string{"NAME"},
		request: func(args []string) Request {
			r := get("v1", "sandboxes", "images", args[0])
			r.Header = teamHeader(team)
			return r
		},
		show: showOne(imageColumns),
	})
	for _, c := range []*cobra.Command{push, get} {
		c.Flags().StringVar(&team, "team", "", "the team the image belongs to (X-Team-Id)")
	}
	cmd.AddCommand(push, get)
	return cmd
}

func teamHeader(team string) http.Header {
	if team == "" {
		return nil
	}
	return http.Header{"X-Team-Id": {team}}
}

// zipDir writes the files of dir into a temporary ZIP, paths relative to dir with forward slashes, and returns
// it open at its start. A symbolic link is stored as a link; the server refuses one that escapes the context.
func zipDir(dir string) (_ *os.File, err error) {
	if _, err := os.Stat(filepath.Join(dir, "Dockerfile")); err != nil {
		return nil, usageErrorf("--dir %s has no Dockerfile at its root", dir)
	}
	f, err := os.CreateTemp("", "modelgate-context-*.zip")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	zw := zip.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := zip.FileInfoHeader(info)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
			_, err := zw.CreateHeader(h)
			return err
		}
		h.Method = zip.Deflate
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			_, err = io.WriteString(w, filepath.ToSlash(target))
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s is neither a file, a directory nor a link", p)
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(w, src)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("failed to zip %s: %w", dir, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return f, nil
}

// upload PUTs the archive to the signed URL. The URL is the credential: no API key goes with it.
func (a *app) upload(ctx context.Context, uploadURL string, archive *os.File, timeout time.Duration) ([]byte, error) {
	info, err := archive.Stat()
	if err != nil {
		return nil, err
	}
	var body io.Reader = archive
	var bar *progress
	if a.stderrTTY && a.output == FormatTable {
		bar = &progress{r: archive, total: info.Size(), w: a.stderr}
		body = bar
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, uploadURL, body)
	if err != nil {
		return nil, fmt.Errorf("failed to build the upload: %w", err)
	}
	req.ContentLength = info.Size()
	req.Header.Set("Content-Type", "application/zip")
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if bar != nil {
		bar.done()
	}
	if err != nil {
		return nil, fmt.Errorf("the upload failed: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("failed to read the upload's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, parseError(resp.StatusCode, resp.Header, raw)
	}
	return raw, nil
}

// progress draws a one-line bar on a terminal while an upload reads its body, at most ten times a second.
type progress struct {
	r     io.Reader
	w     io.Writer
	total int64
	sent  int64
	drawn time.Time
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.sent += int64(n)
	if now := time.Now(); now.Sub(p.drawn) >= 100*time.Millisecond || errors.Is(err, io.EOF) {
		p.drawn = now
		p.draw()
	}
	return n, err
}

func (p *progress) draw() {
	const width = 30
	frac := 1.0
	if p.total > 0 {
		frac = float64(p.sent) / float64(p.total)
	}
	filled := int(frac * width)
	bar := make([]byte, width)
	for i := range bar {
		if i < filled {
			bar[i] = '='
		} else {
			bar[i] = ' '
		}
	}
	fmt.Fprintf(p.w, "\rUploading [%s] %3.0f%% %s / %s", bar, frac*100, bytesHuman(p.sent), bytesHuman(p.total))
}

func (p *progress) done() {
	p.draw()
	fmt.Fprintln(p.w)
}

func bytesHuman(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
