package loadbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/modelgate/modelgate/test/testutil"
)

// Peers are real products a user could put in gatewayd's place, run as separate processes on loopback ports
// and driven in the same interleaved rounds: Debian's nginx as a plain reverse proxy, and Portkey's AI gateway
// (@portkey-ai/gateway, pinned in test/loadbench/portkey/package-lock.json) under node. A peer that is not
// installed is skipped: its rows say why, and the run goes on.

// errNotInstalled marks a peer whose program is missing: its rows are "not run", not a failed phase.
var errNotInstalled = errors.New("not installed")

// peer is one running peer process and the targets it serves.
type peer struct {
	name          string
	plain, stream *Target
	stop          func()
	// pid is its process's (nginx's master, a floor's one process); zero for gatewayd in its own process.
	pid int
}

// PeerPaths locate the peers' programs; empty fields are looked up (nginx on PATH and in /usr/sbin, Portkey
// in test/loadbench/portkey/node_modules).
type PeerPaths struct {
	Nginx, Node, PortkeyDir string
}

// lookNginx finds the nginx binary: Debian installs it in /usr/sbin, which a non-root PATH often lacks.
func lookNginx(path string) (string, error) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("nginx %w: %s", errNotInstalled, path)
		}
		return path, nil
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", fmt.Errorf("nginx %w (install Debian's nginx: .ci/run or make bench-peers)", errNotInstalled)
}

// nginxConfig is a plain reverse proxy as a user would tune it for model traffic: two workers, keep-alive to
// the upstream over HTTP/1.1, no buffering (so every SSE chunk passes at once), no access log (gatewayd writes
// none by default either), and every path under prefix so that it runs without root.
func nginxConfig(prefix string, plainPort, streamPort int, plainUpstream, streamUpstream string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `worker_processes 2;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/client_body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
`, prefix)
	for _, s := range []struct {
		name, upstream string
		port           int
	}{{"plain", plainUpstream, plainPort}, {"paced", streamUpstream, streamPort}} {
		fmt.Fprintf(&b, `  upstream %[1]s {
    server %[2]s;
    keepalive 128;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:%[3]d;
    location / {
      proxy_pass http://%[1]s;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }
  }
`, s.name, s.upstream, s.port)
	}
	b.WriteString("}\n")
	return b.String()
}

// hostPort is the host:port of an http:// URL.
func hostPort(u string) string {
	u = strings.TrimPrefix(u, "http://")
	if i := strings.IndexByte(u, '/'); i >= 0 {
		u = u[:i]
	}
	return u
}

// startNginx runs nginx in front of both upstreams, as nobody when the harness runs as root.
func startNginx(ctx context.Context, paths PeerPaths, u *upstreams) (*peer, error) {
	bin, err := lookNginx(paths.Nginx)
	if err != nil {
		return nil, err
	}
	prefix, err := os.MkdirTemp("", "loadbench-nginx-")
	if err != nil {
		return nil, fmt.Errorf("failed to create nginx's prefix: %w", err)
	}
	plainPort, err := testutil.FreePort()
	if err != nil {
		return nil, err
	}
	streamPort, err := testutil.FreePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConfig(prefix, plainPort, streamPort, hostPort(u.plain.URL), hostPort(u.paced.URL))), 0o644); err != nil {
		return nil, fmt.Errorf("failed to write nginx's config: %w", err)
	}
	errorLog := filepath.Join(prefix, "error.log")
	// Created before the prefix goes to nobody, so that both nginx and the harness (for its output) can write it.
	if err := os.WriteFile(errorLog, nil, 0o644); err != nil {
		return nil, fmt.Errorf("failed to create nginx's error log: %w", err)
	}
	cmd := exec.Command(bin, "-p", prefix, "-c", conf, "-e", errorLog)
	if err := asNobody(cmd, prefix); err != nil {
		return nil, err
	}
	p, err := startPeer(ctx, "nginx", cmd, prefix, []int{plainPort, streamPort}, errorLog)
	if err != nil {
		return nil, err
	}
	p.plain = &Target{Name: "nginx", URL: fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", plainPort), Auth: "Bearer nginx", Model: "echo", StreamModel: "echo"}
	p.stream = &Target{Name: "nginx", URL: fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", streamPort), Auth: "Bearer nginx", Model: "echo", StreamModel: "echo"}
	return p, nil
}

// asNobody makes cmd run as nobody when the harness is root, and gives nobody its directory: nginx's master
// would otherwise stay root. A non-root harness runs it as itself.
func asNobody(cmd *exec.Cmd, dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	const nobody = 65534
	if err := os.Chown(dir, nobody, nobody); err != nil {
		return fmt.Errorf("failed to give %s to nobody: %w", dir, err)
	}
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, nobody, nobody)
	}); err != nil {
		return fmt.Errorf("failed to give %s to nobody: %w", dir, err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	return nil
}

// portkeyDir is where test/loadbench/portkey's package.json installs Portkey: the flag's, else the source
// tree's (the harness is built and run from it), else relative to the working directory.
func portkeyDir(dir string) string {
	if dir != "" {
		return dir
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Join(filepath.Dir(file), "portkey")
		if _, err := os.Stat(d); err == nil {
			return d
		}
	}
	return filepath.Join("test", "loadbench", "portkey")
}

// startPortkey runs Portkey's gateway under node. Each request names the upstream in x-portkey-custom-host,
// with x-portkey-provider: openai, so Portkey forwards OpenAI's chat completions unchanged in shape.
func startPortkey(ctx context.Context, paths PeerPaths, u *upstreams) (*peer, error) {
	node := paths.Node
	if node == "" {
		var err error
		if node, err = exec.LookPath("node"); err != nil {
			return nil, fmt.Errorf("portkey %w: node is not on PATH", errNotInstalled)
		}
	}
	script := filepath.Join(portkeyDir(paths.PortkeyDir), "node_modules", "@portkey-ai", "gateway", "build", "start-server.js")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("portkey %w: no %s (npm ci in test/loadbench/portkey: .ci/run or make bench-peers)", errNotInstalled, script)
	}
	port, err := testutil.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "loadbench-portkey-")
	if err != nil {
		return nil, err
	}
	log := filepath.Join(dir, "portkey.log")
	cmd := exec.Command(node, script, fmt.Sprintf("--port=%d", port), "--headless")
	cmd.Env = append(os.Environ(), "NODE_ENV=production")
	p, err := startPeer(ctx, "portkey", cmd, dir, []int{port}, log)
	if err != nil {
		return nil, err
	}
	target := func(upstream string) *Target {
		h := http.Header{}
		h.Set("x-portkey-provider", "openai")
		h.Set("x-portkey-custom-host", upstream)
		return &Target{Name: "Portkey", URL: fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), Auth: "Bearer portkey",
			Model: "echo", StreamModel: "echo", Header: h}
	}
	p.plain, p.stream = target(u.plain.BaseURL()), target(u.paced.BaseURL())
	return p, nil
}

// startPeer starts cmd with its output in logPath and waits until every port accepts connections.
func startPeer(ctx context.Context, name string, cmd *exec.Cmd, dir string, ports []int, logPath string) (*peer, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return nil, fmt.Errorf("failed to open %s's log: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so that stopping it reaches nginx's workers too.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("failed to start %s: %w", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		out.Close()
		_ = os.RemoveAll(dir)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, port := range ports {
		for {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case err := <-exited:
				exited <- err
				b, _ := os.ReadFile(logPath)
				stop()
				return nil, fmt.Errorf("%s exited before it listened (%v): %.500s", name, err, b)
			case <-ctx.Done():
				stop()
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				stop()
				return nil, fmt.Errorf("%s did not listen on port %d within 30s", name, port)
			}
		}
	}
	return &peer{name: name, stop: stop, pid: cmd.Process.Pid}, nil
}
