package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// The network of the cluster. Every address lives inside the namespace the harness creates; nothing is routed out
// of it (docs/cluster.md, "Its own network").
const (
	// NodeIP is the node's address, on one end of a veth pair whose both ends stay inside the namespace (the
	// machines have no dummy links, and kubelet refuses a loopback node IP).
	NodeIP = "10.250.0.1"
	// peerIP is the default route's gateway, on-link through the pair: it only exists so that kubelet and
	// kube-proxy find a default interface. No interface has it, nothing answers there, and the pair's other end
	// is inside the namespace too, so nothing routed there leaves it.
	peerIP = "10.250.0.2"
	// ClientIP is where a client process run in the namespace (a test's model server or webhook receiver) may
	// listen; pods reach it through the node. It is MODELGATE_CLIENT_ADDR in .dev/cluster.env.
	ClientIP = "10.250.0.10"
	// PodCIDR and ServiceCIDR exist only inside the namespace.
	PodCIDR     = "10.88.0.0/16"
	ServiceCIDR = "10.96.0.0/16"
	// APIServerServiceIP is the first address of ServiceCIDR: the kubernetes Service.
	APIServerServiceIP = "10.96.0.1"
	// nodeLink and peerLink name the veth pair inside the namespace.
	nodeLink = "mgnode0"
	peerLink = "mgnode1"
)

// Netns is a network namespace made with `ip netns add`, deleted by Delete.
type Netns struct {
	Name string
}

// Path is the namespace's bind mount, what setns and `nsenter --net=` take.
func (n Netns) Path() string { return "/var/run/netns/" + n.Name }

// CreateNetns makes the namespace and its links: loopback up, the veth pair with the node and client addresses,
// and a default route through the pair's peer, on-link, so that nothing leaves.
func CreateNetns(name string) (Netns, error) {
	n := Netns{Name: name}
	if os.Geteuid() != 0 {
		return n, errors.New("the cluster needs root: it creates a network namespace (ip netns add), mounts and cgroups")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return n, errors.New("the cluster needs iproute2's ip command to create its network namespace: apt-get install iproute2")
	}
	if err := run("ip", "netns", "add", name); err != nil {
		return n, fmt.Errorf("failed to create network namespace %s: %w", name, err)
	}
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", nodeLink, "type", "veth", "peer", "name", peerLink},
		{"addr", "add", NodeIP + "/24", "dev", nodeLink},
		{"addr", "add", ClientIP + "/24", "dev", nodeLink},
		{"link", "set", nodeLink, "up"},
		{"link", "set", peerLink, "up"},
		{"route", "add", "default", "via", peerIP, "dev", nodeLink, "onlink"},
	}
	for _, s := range steps {
		if err := run("ip", append([]string{"-n", name}, s...)...); err != nil {
			_ = n.Delete()
			return n, fmt.Errorf("failed to set up network namespace %s (ip %s): %w", name, strings.Join(s, " "), err)
		}
	}
	return n, nil
}

// Delete removes the namespace. Its links go with it.
func (n Netns) Delete() error {
	if !n.Exists() {
		return nil
	}
	return run("ip", "netns", "delete", n.Name)
}

// Exists reports whether the namespace is still there.
func (n Netns) Exists() bool {
	_, err := os.Stat(n.Path())
	return err == nil
}

// Command runs name inside the namespace with nsenter --net, which changes only the network namespace: `ip netns
// exec` also remounts /sys, which breaks kubelet's cgroup discovery and would split kubelet's mounts from
// containerd's (docs/cluster.md, "Pitfalls").
func (n Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.Path(), "--", name}, args...)...)
}

// inNetns runs f on an OS thread moved into the namespace. The thread is never moved back: the goroutine ends
// locked, so the runtime retires the thread instead of handing it to other goroutines.
func (n Netns) inNetns(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(n.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("failed to open network namespace %s: %w", n.Name, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("failed to enter network namespace %s: %w", n.Name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// DialContext opens a connection from inside the namespace: the socket is created there, so it reaches the
// cluster's addresses (node, pods, Services) and nothing else. It has the shape of net.Dialer.DialContext, for
// http.Transport and rest.Config.Dial.
func (n Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := n.inNetns(func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		conn = c
		return err
	})
	return conn, err
}

// Listen opens a listener inside the namespace, for a client that pods call (a model server, a webhook receiver,
// the image registry).
func (n Netns) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.inNetns(func() error {
		l, err := net.Listen(network, addr)
		ln = l
		return err
	})
	return ln, err
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
