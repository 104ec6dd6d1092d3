package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/test/cluster"
)

// redisClusterPort is the first of the six Redis Cluster nodes' client ports on ClientIP; each node's cluster bus
// listens on its port plus 10000.
const redisClusterPort = 7000

// startRedisCluster starts a Redis Cluster outside the pods, as a managed Redis's cluster mode would be: six
// redis-server processes inside the cluster's network namespace on the client address, persistence off, each with
// its own directory and cluster configuration file, joined by `redis-cli --cluster create` (three primaries, one
// replica each). It waits until every node serves every slot and every replica copies its primary, and answers the
// nodes' addresses. The processes are stopped, and their directories removed, when the test ends; a failed test
// prints the tail of each node's log first.
func startRedisCluster(t *testing.T, ctx context.Context, c *cluster.Cluster, redisServer string) []string {
	t.Helper()
	redisCLI, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("a Redis Cluster needs Debian's redis-cli (redis-tools): %v", err)
	}
	dir := t.TempDir()
	var addrs []string
	for i := range 6 {
		port := strconv.Itoa(redisClusterPort + i)
		node := filepath.Join(dir, port)
		if err := os.Mkdir(node, 0o755); err != nil {
			t.Fatal(err)
		}
		// The nodes announce the client address (cluster-announce-ip) in the slot map they give clients, which
		// gatewayd's pods then dial.
		rs := c.Netns.Command(context.Background(), redisServer, "--bind", cluster.ClientIP, "--port", port, "--protected-mode", "no",
			"--save", "", "--appendonly", "no", "--dir", node, "--logfile", filepath.Join(node, "redis.log"),
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(node, "nodes.conf"),
			"--cluster-announce-ip", cluster.ClientIP, "--cluster-node-timeout", "5000")
		if err := rs.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				log, _ := os.ReadFile(filepath.Join(node, "redis.log"))
				t.Logf("Redis Cluster node %s log:\n%s", port, tail(string(log), 20))
			}
			_ = rs.Process.Kill()
			_ = rs.Wait()
		})
		addrs = append(addrs, net.JoinHostPort(cluster.ClientIP, port))
	}
	cli := func(addr string, args ...string) (string, error) {
		host, port, _ := net.SplitHostPort(addr)
		out, err := c.Exec(ctx, redisCLI, append([]string{"-h", host, "-p", port}, args...)...)
		return string(out), err
	}
	for _, addr := range addrs {
		eventually(t, 30*time.Second, "Redis Cluster node "+addr+" answering", func() error {
			if out, err := cli(addr, "ping"); err != nil || !strings.Contains(out, "PONG") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	}

	start := time.Now()
	args := append([]string{"--cluster", "create"}, addrs...)
	if out, err := c.Exec(ctx, redisCLI, append(args, "--cluster-replicas", "1", "--cluster-yes")...); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range addrs {
		eventually(t, time.Minute, "Redis Cluster node "+addr+" serving every slot", func() error {
			out, err := cli(addr, "cluster", "info")
			if err != nil || !strings.Contains(out, "cluster_state:ok") || !strings.Contains(out, "cluster_slots_ok:16384") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	}
	eventually(t, time.Minute, "three Redis Cluster replicas copying their primaries", func() error {
		n := 0
		for _, addr := range addrs {
			out, err := cli(addr, "info", "replication")
			if err == nil && strings.Contains(out, "role:slave") && strings.Contains(out, "master_link_status:up") {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d of 3 replicas copy their primary", n)
		}
		return nil
	})
	t.Logf("figure: Redis Cluster of 6 nodes formed in %s", time.Since(start).Round(time.Millisecond))
	return addrs
}

// redisClusterKeys answers how many keys each primary of the Redis Cluster holds, by its address.
func redisClusterKeys(t *testing.T, ctx context.Context, c *cluster.Cluster) map[string]int {
	t.Helper()
	keys := map[string]int{}
	for i := range 6 {
		port := strconv.Itoa(redisClusterPort + i)
		role, err := c.Exec(ctx, "redis-cli", "-h", cluster.ClientIP, "-p", port, "role")
		if err != nil {
			t.Fatalf("redis-cli role on port %s: %v: %s", port, err, role)
		}
		if !strings.HasPrefix(string(role), "master") {
			continue
		}
		out, err := c.Exec(ctx, "redis-cli", "-h", cluster.ClientIP, "-p", port, "dbsize")
		n, perr := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || perr != nil {
			t.Fatalf("redis-cli dbsize on port %s: %v %v: %s", port, err, perr, out)
		}
		keys[net.JoinHostPort(cluster.ClientIP, port)] = n
	}
	return keys
}
