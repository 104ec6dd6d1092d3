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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
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
	// tls reaches a server that serves TLS only (StartTLS, a Deployment with Security.TLS).
	tls *tls.Config
	// username and password authenticate to the server, when it asks.
	username, password string
}

// options are what a client of the server needs to reach it.
func (s *Server) options() *redis.Options {
	return &redis.Options{Addr: s.Addr(), Username: s.username, Password: s.password, TLSConfig: s.tls}
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
	files := newTLSFiles(t)
	s := &Server{t: t, Port: freePort(t), tls: files.client}
	s.args = append(files.serverArgs(s.Port), "--dir", t.TempDir())
	// Before it starts, so a server that never answers is stopped too.
	t.Cleanup(s.Kill)
	s.Restart()
	return s, files.ca
}

// tlsFiles are a throwaway CA and a certificate for 127.0.0.1 it signs, in a directory of the test's.
type tlsFiles struct {
	dir, ca, cert, key string
	// client trusts the CA.
	client *tls.Config
}

func newTLSFiles(t testing.TB) *tlsFiles {
	t.Helper()
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := certificates(t)
	f := &tlsFiles{dir: dir, ca: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
	for name, b := range map[string][]byte{f.ca: caPEM, f.cert: certPEM, f.key: keyPEM} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	f.client = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return f
}

// serverArgs serve TLS only on port, and dial other servers (a replica its primary, a sentinel what it watches,
// cluster nodes one another) over TLS. The plain port is off: the port Restart gives comes first, and a later one
// wins.
func (f *tlsFiles) serverArgs(port int) []string {
	return []string{"--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", f.cert, "--tls-key-file", f.key,
		"--tls-ca-cert-file", f.ca, "--tls-auth-clients", "no", "--tls-replication", "yes"}
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
		// Client authentication too: cluster nodes present it to one another on the cluster bus, which always asks.
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
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
	return startSecured(t, Security{}, nil, args...)
}

// startSecured starts a redis-server with args, which clients reach with sec's user and password (the server
// asks for them when sec has a password) and, with files, over TLS only.
func startSecured(t testing.TB, sec Security, files *tlsFiles, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("SKIPPING: redis-server is not installed (apt-get install redis-server); the Redis tests did NOT run")
	}
	if !slices.Contains(args, "--dir") && (len(args) == 0 || !strings.HasSuffix(args[0], ".conf")) {
		// A replica saves the primary's data it receives to a file, even with persistence off: in a directory of
		// the test's, not the package's.
		args = append(args, "--dir", t.TempDir())
	}
	s := &Server{t: t, Port: freePort(t), args: args, username: sec.Username, password: sec.Password}
	if files != nil {
		s.tls = files.client
		s.args = append(s.args, files.serverArgs(s.Port)...)
	}
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
	c := redis.NewClient(s.options())
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

// Pause stops the server with SIGSTOP until Resume (or the test's end): it holds its connections and answers
// nothing, as a replica stuck or cut off does. A paused replica acknowledges no write, so a WAIT for it times out.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("redistest: failed to pause redis-server on port %d: %v", s.Port, err)
	}
	s.t.Cleanup(s.Resume)
}

// Reader returns a connection to the server itself, closed when the test ends, that reads what it holds: on a
// replica, what it has received.
func (s *Server) Reader() *redis.Conn {
	c := redis.NewClient(s.options())
	conn := c.Conn()
	s.t.Cleanup(func() { _ = conn.Close(); _ = c.Close() })
	// A cluster replica redirects reads to its primary unless the connection says READONLY; other servers refuse
	// the command and answer reads anyway.
	_ = conn.ReadOnly(context.Background()).Err()
	return conn
}

// Resume continues a paused server.
func (s *Server) Resume() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
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
	o := s.options()
	o.MaxRetries = -1
	c := redis.NewClient(o)
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
	// Security is how clients authenticate and whether they dial TLS (StartSecured).
	Security Security
	// CAFile is the PEM file of the CA that signs every server's certificate, with Security.TLS.
	CAFile string
	tls    *tlsFiles
}

// Security is what a deployment asks of its clients: a password (and an ACL user) on every data node, a
// password on every sentinel, TLS only. The zero value asks nothing.
type Security struct {
	// Username is an ACL user of every data node with all permissions, whose password is Password; the default
	// user has Password too (replicas and redis-cli use it).
	Username string
	// Password is every data node's password (requirepass, and masterauth for replicas).
	Password string
	// SentinelPassword is every sentinel's password (requirepass on the sentinels).
	SentinelPassword string
	// TLS serves TLS only, on every node and sentinel, with a certificate for 127.0.0.1 of a throwaway CA
	// (Deployment.CAFile); servers dial one another over TLS too.
	TLS bool
}

// StartDeployment starts a deployment of mode, waits until it serves, and stops it when the test ends.
func StartDeployment(t testing.TB, mode string) *Deployment {
	t.Helper()
	return StartSecured(t, mode, Security{})
}

// StartSecured starts a deployment of mode as StartDeployment does, which asks its clients what sec says.
func StartSecured(t testing.TB, mode string, sec Security) *Deployment {
	t.Helper()
	d := &Deployment{t: t, Mode: mode, Security: sec}
	if sec.TLS {
		d.tls = newTLSFiles(t)
		d.CAFile = d.tls.ca
	}
	switch mode {
	case Standalone:
		d.Nodes = []*Server{d.dataNode()}
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

// EachFailover runs fn in a subtest per deployment that fails over (Sentinel, Cluster), each on a deployment of
// its own, once without WAIT (wait is nil) and once with WAIT for one replica within 200 ms
// (--redis-wait-replicas=1): the two sides of what a failover may lose.
func EachFailover(t *testing.T, fn func(t *testing.T, d *Deployment, wait *redisclient.Wait)) {
	for _, mode := range []string{Sentinel, Cluster} {
		for _, replicas := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/wait=%d", mode, replicas), func(t *testing.T) {
				fn(t, StartDeployment(t, mode), redisclient.NewWait(replicas, 200*time.Millisecond, logr.Discard()))
			})
		}
	}
}

// dataNode starts a data node of the deployment, with args.
func (d *Deployment) dataNode(args ...string) *Server {
	d.t.Helper()
	sec := d.Security
	if sec.Password != "" {
		args = append(args, "--requirepass", sec.Password, "--masterauth", sec.Password)
	}
	if sec.Username != "" {
		args = append(args, "--user", sec.Username, "on", ">"+sec.Password, "~*", "&*", "+@all")
	}
	return startSecured(d.t, Security{Username: sec.Username, Password: sec.Password}, d.tls, args...)
}

// clusterClient reaches the deployment's cluster as the harness does (no slot map reload).
func (d *Deployment) clusterClient() *redis.ClusterClient {
	o := d.Nodes[0].options()
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: d.Addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig})
}

// Options are what gatewayd's --redis-* flags (and MODELGATE_REDIS_PASSWORD, MODELGATE_REDIS_SENTINEL_PASSWORD)
// say to reach the deployment.
func (d *Deployment) Options() redisclient.Options {
	o := redisclient.Options{Mode: d.Mode, Addrs: d.Addrs, Username: d.Security.Username, Password: d.Security.Password,
		SentinelPassword: d.Security.SentinelPassword, TLS: d.Security.TLS, TLSCAFile: d.CAFile}
	switch d.Mode {
	case Sentinel:
		o.MasterName = MasterName
	case Standalone:
		o.URL, o.Addrs, o.TLS = d.Nodes[0].URL(), nil, false
		if d.Security.TLS {
			o.URL = "rediss://" + d.Nodes[0].Addr()
		}
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
		c := d.clusterClient()
		defer c.Close()
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			d.t.Fatalf("redistest: no primary serves %s: %v", key, err)
		}
		addr = n.Options().Addr
	case Sentinel:
		c := redis.NewSentinelClient(d.Sentinels[0].options())
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

// ReplicaOf returns the data node that replicates primary.
func (d *Deployment) ReplicaOf(ctx context.Context, primary *Server) *Server {
	d.t.Helper()
	for _, n := range d.Nodes {
		if port, err := infoField(ctx, n, "master_port"); err == nil && port == strconv.Itoa(primary.Port) {
			return n
		}
	}
	d.t.Fatalf("redistest: no replica of %s", primary.Addr())
	return nil
}

// infoField is the field name of s's INFO replication.
func infoField(ctx context.Context, s *Server, name string) (string, error) {
	c := redis.NewClient(s.options())
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

// ReplicationLag is how many bytes of primary's replication stream its replica has not processed yet: the
// primary's master_repl_offset against the replica's slave_repl_offset, read right after. What the replica has not
// received dies with the primary if it dies now.
func (d *Deployment) ReplicationLag(ctx context.Context, primary *Server) (int64, error) {
	offset, err := infoField(ctx, primary, "master_repl_offset")
	if err != nil {
		return 0, err
	}
	for _, n := range d.Nodes {
		if port, err := infoField(ctx, n, "master_port"); err != nil || port != strconv.Itoa(primary.Port) {
			continue
		}
		processed, err := infoField(ctx, n, "slave_repl_offset")
		if err != nil {
			return 0, err
		}
		a, _ := strconv.ParseInt(offset, 10, 64)
		b, _ := strconv.ParseInt(processed, 10, 64)
		return a - b, nil
	}
	return 0, fmt.Errorf("redistest: no replica of %s", primary.Addr())
}

// Writes are what KillUnderWrites's writers did: the ids whose write succeeded and those whose write failed.
type Writes struct {
	Accepted, Refused []string
}

// KillUnderWrites runs eight writers, each calling write with ids of its own ("<writer>-<n>", a second's deadline
// each), kills victim (SIGKILL) once 500 writes have succeeded, and stops once writes have failed and 500 more
// have succeeded after the kill: the store took writes again after the failover. It fails the test when that does
// not happen within 60 s.
func KillUnderWrites(t testing.TB, victim *Server, write func(ctx context.Context, id string) error) Writes {
	t.Helper()
	var mu sync.Mutex
	var w Writes
	var failed, afterKill atomic.Int64
	var killed atomic.Bool
	var killOnce sync.Once
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for writer := range 8 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				id := fmt.Sprintf("%d-%d", writer, i)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := write(ctx, id)
				cancel()
				if err != nil {
					failed.Add(1)
					mu.Lock()
					w.Refused = append(w.Refused, id)
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				mu.Lock()
				w.Accepted = append(w.Accepted, id)
				n := len(w.Accepted)
				mu.Unlock()
				if n == 500 {
					killOnce.Do(func() { victim.Kill(); killed.Store(true) })
				}
				// Enough written after the takeover: stop.
				if killed.Load() && failed.Load() > 0 && afterKill.Add(1) >= 500 {
					return
				}
			}
		})
	}
	wg.Wait()
	if afterKill.Load() < 500 {
		t.Fatalf("redistest: the store did not write again after the failover: %d written, %d failed", len(w.Accepted), failed.Load())
	}
	return w
}

// startSentinel starts a primary, its replica and three sentinels that monitor the primary, and waits until the
// replica copies the primary and every sentinel names the primary.
func (d *Deployment) startSentinel() {
	t := d.t
	primary := d.dataNode()
	replica := d.dataNode("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	d.Nodes = []*Server{primary, replica}
	dir := t.TempDir()
	for i := range 3 {
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
		text := fmt.Sprintf("bind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			dir, MasterName, primary.Port, MasterName, MasterName)
		if d.Security.Password != "" {
			text += fmt.Sprintf("sentinel auth-pass %s %s\n", MasterName, d.Security.Password)
		}
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{conf, "--sentinel"}
		if d.Security.SentinelPassword != "" {
			// A sentinel gives its own password to the other sentinels too.
			args = append(args, "--requirepass", d.Security.SentinelPassword)
		}
		s := startSecured(t, Security{Password: d.Security.SentinelPassword}, d.tls, args...)
		d.Sentinels = append(d.Sentinels, s)
		d.Addrs = append(d.Addrs, s.Addr())
	}
	until(t, "the replica copies the primary", func(ctx context.Context) bool {
		c := redis.NewClient(replica.options())
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	streams(t, primary, "redistest-probe")
	for _, s := range d.Sentinels {
		until(t, "sentinel "+s.Addr()+" names the primary", func(ctx context.Context) bool {
			c := redis.NewSentinelClient(s.options())
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
		args := []string{"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(freePort(t)),
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)), "--dir", dir,
			"--cluster-node-timeout", "2000"}
		if d.tls != nil {
			args = append(args, "--tls-cluster", "yes")
		}
		s := d.dataNode(args...)
		d.Nodes = append(d.Nodes, s)
		d.Addrs = append(d.Addrs, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	args := append([]string{"--cluster", "create"}, d.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if d.Security.Password != "" {
		args = append(args, "-a", d.Security.Password, "--no-auth-warning")
	}
	if d.tls != nil {
		args = append(args, "--tls", "--cacert", d.tls.ca)
	}
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range d.Nodes {
		until(t, "node "+s.Addr()+" serves every slot", func(ctx context.Context) bool {
			c := redis.NewClient(s.options())
			defer c.Close()
			info, err := c.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384")
		})
	}
	// Three primaries, each with its replica copying it.
	until(t, "three replicas copy their primaries", func(ctx context.Context) bool {
		n := 0
		for _, s := range d.Nodes {
			c := redis.NewClient(s.options())
			info, err := c.Info(ctx, "replication").Result()
			c.Close()
			if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
				n++
			}
		}
		return n == 3
	})
	// A key on each primary, to see its replica take its writes.
	c := d.clusterClient()
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
	c := redis.NewClient(primary.options())
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
