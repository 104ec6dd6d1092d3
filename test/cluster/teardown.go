package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// DefaultDir is where the cluster keeps its state. It is fixed, like NetnsName, so that a cluster left behind by a
// killed process is found and removed by the next Up or by `hack/cluster.sh down`.
var DefaultDir = filepath.Join(os.TempDir(), "modelgate-cluster")

// kubeletSysctls are the host settings kubelet rewrites on every start (protectKernelDefaults false); Up saves
// them and Down puts them back.
var kubeletSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"}

// hostPathCandidates are the paths outside the cluster's directory that kubelet, containerd's shims and the CNI
// plugins use whatever their configuration says. Down removes those that were not there before Up.
var hostPathCandidates = []string{
	"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/containerd", "/opt/containerd",
}

const sysctlFile = "sysctls.saved"

func missingHostPaths() []string {
	var missing []string
	for _, p := range hostPathCandidates {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, p)
		}
	}
	return missing
}

func readSysctls(keys []string) (map[string]string, error) {
	m := map[string]string{}
	for _, k := range keys {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return nil, err
		}
		m[k] = strings.TrimSpace(string(b))
	}
	return m, nil
}

func writeSysctls(m map[string]string) error {
	var errs []error
	for k, v := range m {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Down stops every component and removes what the cluster made, in the order that leaves nothing behind: the pods,
// then kubelet, containerd, the control plane (the API server before etcd), the leftover processes of the pods,
// the mounts, the pods' cgroups, the network namespace, the host paths and the directory. It also puts back the
// sysctls kubelet rewrote. It is safe to call more than once.
func (c *Cluster) Down() error {
	var errs []error
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	byName := map[string]*process{}
	for _, p := range procs {
		byName[p.name] = p
	}
	stop := func(names ...string) {
		for _, n := range names {
			if p := byName[n]; p != nil {
				p.stop(20 * time.Second)
			}
		}
	}
	// Nothing recreates a pod once the controllers and the scheduler are gone; kubelet then stops the pods it runs.
	stop("kube-controller-manager", "kube-scheduler")
	if c.Kube != nil && byName["kubelet"] != nil {
		c.deletePods()
	}
	stop("kube-proxy", "kubelet", "containerd", "kube-apiserver", "etcd")
	if c.sysctls != nil {
		if err := writeSysctls(c.sysctls); err != nil {
			errs = append(errs, fmt.Errorf("failed to restore sysctls: %w", err))
		}
	}
	if err := cleanupDir(c.Dir, c.opts.Log); err != nil {
		errs = append(errs, err)
	}
	if c.Netns.Name != "" {
		if err := c.Netns.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range c.hostPaths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	releaseNetnsDir()
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// deletePods asks for every pod to go and waits, up to 30 s, for kubelet to stop them.
func (c *Cluster) deletePods() {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	nss, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, ns := range nss.Items {
		_ = c.Kube.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](5)}, metav1.ListOptions{})
	}
	for ctx.Err() == nil {
		pods, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Cleanup removes a cluster that a killed process left behind at DefaultDir: its processes, mounts, cgroups,
// network namespace and saved sysctls. It does nothing when there is none.
func Cleanup(log io.Writer) error {
	var errs []error
	if err := cleanupDir(DefaultDir, log); err != nil {
		errs = append(errs, err)
	}
	if n := (Netns{Name: NetnsName}); n.Exists() {
		if err := n.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	releaseNetnsDir()
	if err := os.RemoveAll(DefaultDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cleanupDir kills every process that runs from dir or in a pod's cgroup, unmounts what is mounted below dir, and
// removes the pods' cgroups.
func cleanupDir(dir string, log io.Writer) error {
	var errs []error
	if saved, err := os.ReadFile(filepath.Join(dir, sysctlFile)); err == nil {
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(saved)), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				m[k] = v
			}
		}
		if err := writeSysctls(m); err != nil {
			errs = append(errs, err)
		}
	}
	// A killed process may take a moment to go (a pod's processes exit after their cgroup's): look again for up
	// to 10 s, killing each pid once.
	killed := map[int]bool{}
	for range 50 {
		pids := leftoverPids(dir)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			if killed[pid] {
				continue
			}
			killed[pid] = true
			if log != nil {
				fmt.Fprintf(log, "cluster: killing leftover process %d\n", pid)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, m := range mountsUnder(dir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("failed to unmount %s: %w", m, err))
		}
	}
	if err := removePodCgroups(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// leftoverPids are the processes started from dir (components, containerd shims, which carry its socket path in
// their arguments) and those in a pod's cgroup. An argument names dir when it is dir or a path below it: a process
// whose argument only starts with the same letters (a lock file /tmp/modelgate-cluster.lock beside the cluster's
// /tmp/modelgate-cluster) is not the cluster's.
func leftoverPids(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cgroup, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if (dir != "" && namesDir(string(cmdline), dir)) || strings.Contains(string(cgroup), "/kubepods") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// namesDir reports whether a NUL-separated command line holds dir itself or a path below it, anywhere in an
// argument (--config=/dir/x names it too).
func namesDir(cmdline, dir string) bool {
	return strings.Contains(cmdline, dir+"/") || strings.Contains(cmdline+"\x00", dir+"\x00")
}

// mountsUnder lists the mount points below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var mounts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if dir != "" && (mp == dir || strings.HasPrefix(mp, dir+"/")) {
			mounts = append(mounts, mp)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	return mounts
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// removePodCgroups removes kubelet's kubepods hierarchy in every cgroup v1 controller, depth first.
func removePodCgroups() error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("failed to remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// releaseNetnsDir unmounts /run/netns, which `ip netns add` made a mount point, once no namespace is left in it.
func releaseNetnsDir() {
	for _, d := range []string{"/run/netns", "/var/run/netns"} {
		entries, err := os.ReadDir(d)
		if err != nil || len(entries) > 0 {
			continue
		}
		_ = syscall.Unmount(d, syscall.MNT_DETACH)
	}
	entries, err := os.ReadDir("/run/netns")
	if err == nil && len(entries) == 0 {
		_ = os.Remove("/run/netns")
	}
}

// Leftovers lists what a stopped cluster would have left on the machine: processes, mounts, pod cgroups, the
// network namespace, and host paths it made. Empty means clean.
func Leftovers(dir string) []string {
	var left []string
	for _, pid := range leftoverPids(dir) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		left = append(left, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
	}
	for _, m := range mountsUnder(dir) {
		left = append(left, "mount "+m)
	}
	if roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(roots) > 0 {
		left = append(left, "cgroups "+strings.Join(roots, ", "))
	}
	if (Netns{Name: NetnsName}).Exists() {
		left = append(left, "network namespace "+NetnsName)
	}
	if out, err := exec.Command("ip", "link", "show").Output(); err == nil {
		for _, l := range []string{nodeLink, peerLink, "mgcni0"} {
			if strings.Contains(string(out), l) {
				left = append(left, "link "+l+" in the machine's network namespace")
			}
		}
	}
	// etcd and kube-apiserver are left out of this check by name: envtest suites run their own on the same
	// machine. The cluster's own carry its directory in their arguments, which leftoverPids checks above.
	for _, p := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "kube-proxy", "kube-scheduler", "kube-controller-manager"} {
		if out, _ := exec.Command("pgrep", "-x", p).Output(); len(strings.TrimSpace(string(out))) > 0 {
			left = append(left, "process "+p+" "+strings.TrimSpace(string(out)))
		}
	}
	return left
}
