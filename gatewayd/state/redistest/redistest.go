// Package redistest runs throwaway Redis deployments for tests, on free loopback ports with persistence off: a
// standalone redis-server (killable and restartable on the same port, so tests can cut Redis mid-load and bring
// it back), a Sentinel setup (a primary, a replica and three sentinels) and a Redis Cluster (three primaries and
// three replicas, made by redis-cli --cluster create). Each test that starts one stops its processes and removes
// their directories when it ends, failed or not. Tests skip, loudly, only when the redis-server binary is absent
// (the CI image installs Debian's redis-server, whose 7.0 runs Sentinel and Cluster).
package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgate/modelgate/gatewayd/state/redisclient"
)

// The deployments a store runs on, as gatewayd's --redis-mode names them.
const (
	Standalone = redisclient.Standalone
	Sentinel   = redisclient.Sentinel
	Cluster    = redisclient.Cluster
)

// Modes lists every deployment, in the order Each runs them.
var Modes = []string{Standalone, Sentinel, Cluster}

// MasterName is the name the sentinels know the primary by.
const MasterName = "modelgate"

// waitFor bounds every wait of this package for a deployment to form.
const waitFor = 30 * time.Second

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Port int
	// args are the arguments beyond the port, kept for Restart.
	args []string
	cmd  *exec.Cmd
	// tls reaches a server that serves TLS only (StartTLS).
	tls *tls.Config
}

// Start starts a standalone redis-server on a free loopback port and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return startServer(t)
}

// StartArgs starts a standalone redis-server as Start does, with more arguments (--requirepass, say).
func StartArgs(t testing.TB, args ...string) *Server {
	t.Helper()
	return startServer(t, args...)
}

// StartTLS starts a standalone redis-server that serves TLS only, with a certificate for 127.0.0.1 signed by a CA
// of its own, and returns it with the PEM file of that CA.
func StartTLS(t testing.TB) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := certificates(t)
	files := map[string][]byte{"ca.crt": caPEM, "tls.crt": certPEM, "tls.key": keyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	s := &Server{t: t, Port: freePort(t), tls: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	// The plain port is off; the port Restart gives comes first, and a later one wins.
	s.args = []string{"--port", "0", "--tls-port", strconv.Itoa(s.Port), "--tls-cert-file", filepath.Join(dir, "tls.crt"),
		"--tls-key-file", filepath.Join(dir, "tls.key"), "--tls-ca-cert-file", filepath.Join(dir, "ca.crt"),
		"--tls-auth-clients", "no", "--dir", dir}
	// Before it starts, so a server that never answers is stopped too.
	t.Cleanup(s.Kill)
	s.Restart()
	return s, filepath.Join(dir, "ca.crt")
}

// certificates returns a CA, and a server certificate and key for 127.0.0.1 that it signs, in PEM.
func certificates(t testing.TB) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func startServer(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("SKIPPING: redis-server is not installed (apt-get install redis-server); the Redis tests did NOT run")
	}
	if !slices.Contains(args, "--dir") && (len(args) == 0 || !strings.HasSuffix(args[0], ".conf")) {
		// A replica saves the primary's data it receives to a file, even with persistence off: in a directory of
		// the test's, not the package's.
		args = append(args, "--dir", t.TempDir())
	}
	s := &Server{t: t, Port: freePort(t), args: args}
	// Before it starts, so a server that never answers is stopped too.
	t.Cleanup(s.Kill)
	s.Restart()
	return s
}

// freePort is a loopback port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Client returns a client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server with SIGKILL and waits for it to exit. It is a no-op when it is not running.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server (again) on the same port, empty, and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var cmd *exec.Cmd
	if len(s.args) > 0 && strings.HasSuffix(s.args[0], ".conf") {
		// A configuration file comes first (a sentinel's, which it rewrites).
		cmd = exec.Command("redis-server", append([]string{s.args[0], "--port", strconv.Itoa(s.Port)}, s.args[1:]...)...)
	} else {
		cmd = exec.Command("redis-server", append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--protected-mode", "no", "--repl-diskless-sync-delay", "0"}, s.args...)...)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("failed to start redis-server: %v", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, TLSConfig: s.tls})
	defer c.Close()
	for range 500 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		// A server that asks for a password answers too.
		if err == nil || redis.HasErrorPrefix(err, "NOAUTH") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatal(fmt.Errorf("redis-server on port %d never answered", s.Port))
}

// Deployment is a running Redis of one mode.
type Deployment struct {
	t    testing.TB
	Mode string
	// Addrs are what gatewayd's --redis-addrs takes: the sentinels, or every node of the cluster. A standalone
	// deployment has its one server.
	Addrs []string
	// Nodes are the data nodes: the standalone server; the Sentinel's primary then its replica; the cluster's
	// nodes, primaries and replicas in the order redis-cli was given them.
	Nodes []*Server
	// Sentinels are the sentinels of a Sentinel deployment.
	Sentinels []*Server
}

// StartDeployment starts a deployment of mode, waits until it serves, and stops it when the test ends.
func StartDeployment(t testing.TB, mode string) *Deployment {
	t.Helper()
	d := &Deployment{t: t, Mode: mode}
	switch mode {
	case Standalone:
		d.Nodes = []*Server{startServer(t)}
		d.Addrs = []string{d.Nodes[0].Addr()}
	case Sentinel:
		d.startSentinel()
	case Cluster:
		d.startCluster()
	default:
		t.Fatalf("redistest: unknown mode %q", mode)
	}
	return d
}

// Each runs fn in a subtest per mode, each on a deployment of its own.
func Each(t *testing.T, fn func(t *testing.T, d *Deployment)) {
	for _, mode := range Modes {
		t.Run(mode, func(t *testing.T) { fn(t, StartDeployment(t, mode)) })
	}
}

// Options are what gatewayd's --redis-* flags say to reach the deployment.
func (d *Deployment) Options() redisclient.Options {
	o := redisclient.Options{Mode: d.Mode, Addrs: d.Addrs}
	switch d.Mode {
	case Sentinel:
		o.MasterName = MasterName
	case Standalone:
		o.URL, o.Addrs = d.Nodes[0].URL(), nil
	}
	return o
}

// Client returns a client of the deployment, as gatewayd builds it (redisclient.New), closed when the test ends.
func (d *Deployment) Client() redis.UniversalClient {
	c, err := redisclient.New(d.Options())
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Keys lists the keys that match pattern on every primary c reaches: the one primary of standalone Redis and
// Sentinel, each primary of a cluster.
func Keys(ctx context.Context, c redis.UniversalClient, pattern string) ([]string, error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return c.Keys(ctx, pattern).Result()
	}
	var mu sync.Mutex
	var all []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, pattern).Result()
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	return all, err
}

// PrimaryOf returns the data node that serves key now: the primary of its slot on a cluster, the primary the
// sentinels name, or the standalone server.
func (d *Deployment) PrimaryOf(ctx context.Context, key string) *Server {
	d.t.Helper()
	var addr string
	switch d.Mode {
	case Cluster:
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: d.Addrs})
		defer c.Close()
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			d.t.Fatalf("redistest: no primary serves %s: %v", key, err)
		}
		addr = n.Options().Addr
	case Sentinel:
		c := redis.NewSentinelClient(&redis.Options{Addr: d.Sentinels[0].Addr()})
		defer c.Close()
		hp, err := c.GetMasterAddrByName(ctx, MasterName).Result()
		if err != nil || len(hp) != 2 {
			d.t.Fatalf("redistest: the sentinel names no primary: %v", err)
		}
		addr = net.JoinHostPort(hp[0], hp[1])
	default:
		return d.Nodes[0]
	}
	for _, n := range d.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	d.t.Fatalf("redistest: the primary %s is none of the deployment's nodes", addr)
	return nil
}

// ReplicationLag is how many bytes of primary's replication stream its replica has not processed yet: the
// primary's master_repl_offset against the replica's slave_repl_offset, read right after. What the replica has not
// received dies with the primary if it dies now.
func (d *Deployment) ReplicationLag(ctx context.Context, primary *Server) (int64, error) {
	field := func(s *Server, name string) (string, error) {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return v, nil
			}
		}
		return "", nil
	}
	offset, err := field(primary, "master_repl_offset")
	if err != nil {
		return 0, err
	}
	for _, n := range d.Nodes {
		if port, err := field(n, "master_port"); err != nil || port != strconv.Itoa(primary.Port) {
			continue
		}
		processed, err := field(n, "slave_repl_offset")
		if err != nil {
			return 0, err
		}
		a, _ := strconv.ParseInt(offset, 10, 64)
		b, _ := strconv.ParseInt(processed, 10, 64)
		return a - b, nil
	}
	return 0, fmt.Errorf("redistest: no replica of %s", primary.Addr())
}

// startSentinel starts a primary, its replica and three sentinels that monitor the primary, and waits until the
// replica copies the primary and every sentinel names the primary.
func (d *Deployment) startSentinel() {
	t := d.t
	primary := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	d.Nodes = []*Server{primary, replica}
	dir := t.TempDir()
	for i := range 3 {
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
		text := fmt.Sprintf("bind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			dir, MasterName, primary.Port, MasterName, MasterName)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s := startServer(t, conf, "--sentinel")
		d.Sentinels = append(d.Sentinels, s)
		d.Addrs = append(d.Addrs, s.Addr())
	}
	until(t, "the replica copies the primary", func(ctx context.Context) bool {
		c := redis.NewClient(&redis.Options{Addr: replica.Addr()})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	streams(t, primary, "redistest-probe")
	for _, s := range d.Sentinels {
		until(t, "sentinel "+s.Addr()+" names the primary", func(ctx context.Context) bool {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
			defer c.Close()
			addr, err := c.GetMasterAddrByName(ctx, MasterName).Result()
			return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(primary.Port)
		})
	}
}

// startCluster starts six cluster-enabled nodes, joins them with redis-cli --cluster create (three primaries,
// one replica each), and waits until every node serves every slot.
func (d *Deployment) startCluster() {
	t := d.t
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("SKIPPING: redis-cli is not installed (apt-get install redis-tools); the Redis Cluster tests did NOT run")
	}
	dir := t.TempDir()
	for i := range 6 {
		// The bus port is given, since port+10000 may not be free (or a port at all).
		s := startServer(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(freePort(t)),
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)), "--dir", dir,
			"--cluster-node-timeout", "2000")
		d.Nodes = append(d.Nodes, s)
		d.Addrs = append(d.Addrs, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	args := append([]string{"--cluster", "create"}, d.Addrs...)
	out, err := exec.CommandContext(ctx, "redis-cli", append(args, "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range d.Nodes {
		until(t, "node "+s.Addr()+" serves every slot", func(ctx context.Context) bool {
			c := redis.NewClient(&redis.Options{Addr: s.Addr()})
			defer c.Close()
			info, err := c.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384")
		})
	}
	// Three primaries, each with its replica copying it.
	until(t, "three replicas copy their primaries", func(ctx context.Context) bool {
		n := 0
		for _, s := range d.Nodes {
			c := redis.NewClient(&redis.Options{Addr: s.Addr()})
			info, err := c.Info(ctx, "replication").Result()
			c.Close()
			if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
				n++
			}
		}
		return n == 3
	})
	// A key on each primary, to see its replica take its writes.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: d.Addrs})
	defer c.Close()
	probes := map[string]string{}
	for i := 0; len(probes) < 3 && i < 1000; i++ {
		key := fmt.Sprintf("redistest-probe-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		n, err := c.MasterForKey(ctx, key)
		cancel()
		if err != nil {
			t.Fatalf("redistest: no primary serves %s: %v", key, err)
		}
		if _, ok := probes[n.Options().Addr]; !ok {
			probes[n.Options().Addr] = key
		}
	}
	for _, s := range d.Nodes {
		if key, ok := probes[s.Addr()]; ok {
			streams(t, s, key)
		}
	}
}

// streams waits until primary's replica takes its writes: WAIT for one replica after a write of key, which it then
// deletes. A replica is "online" once it has loaded the primary's data, but the primary streams its writes only
// from the replica's first acknowledgement, up to a second later: writes made before that die with the primary.
func streams(t testing.TB, primary *Server, key string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	// One connection, since WAIT waits for the writes of the connection that sends it.
	conn := c.Conn()
	defer conn.Close()
	if err := conn.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatalf("redistest: write to %s: %v", primary.Addr(), err)
	}
	if n, err := conn.Wait(ctx, 1, waitFor).Result(); err != nil || n < 1 {
		t.Fatalf("redistest: the replica of %s did not take a write within %s: %d, %v", primary.Addr(), waitFor, n, err)
	}
	if err := conn.Del(ctx, key).Err(); err != nil {
		t.Fatalf("redistest: delete on %s: %v", primary.Addr(), err)
	}
}

// until polls ok until it holds, for at most waitFor, and fails the test naming what never happened.
func until(t testing.TB, what string, ok func(ctx context.Context) bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		done := ok(ctx)
		cancel()
		if done {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redistest: %s did not happen within %s", what, waitFor)
}
