package cluster

import (
	"fmt"
	"path/filepath"
)

// containerdConfig keeps containerd's root, state, sockets and plugin directories inside dir, so that a second
// containerd on the machine (or a later cluster) never shares them. docs/cluster.md explains each setting.
func containerdConfig(dir string) string {
	c := filepath.Join(dir, "containerd")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  address = %[5]q

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[7]q
  # Root cannot lower oom_score_adj on these machines (no CAP_SYS_RESOURCE in the bounding set).
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory, not /var/run/netns, which ip netns owns.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # cgroup v1 and no systemd: cgroupfs, as kubelet's cgroupDriver.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ""
`, filepath.Join(c, "root"), filepath.Join(c, "state"), filepath.Join(c, "containerd.sock"),
		filepath.Join(c, "containerd.sock.ttrpc"), filepath.Join(c, "debug.sock"), filepath.Join(c, "opt"),
		PauseImage, cniBinDir, filepath.Join(dir, "cni", "net.d"))
}

// cniConfig is the pod network: one bridge inside the namespace, addresses from PodCIDR, and no masquerade, since
// nothing leaves the namespace. hairpinMode lets a pod reach itself through a Service.
func cniConfig(dir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "modelgate",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "mgcni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, PodCIDR, filepath.Join(dir, "cni", "ipam"))
}

// kubeletConfigYAML is the node's KubeletConfiguration: the settings that work on cgroup v1 without systemd and
// without CAP_SYS_RESOURCE, with every directory inside dir (docs/cluster.md, "kubelet").
func kubeletConfigYAML(dir, containerdSock, caFile, certFile, keyFile string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%[1]s
address: %[2]s
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
oomScoreAdj: 0
failSwapOn: false
protectKernelDefaults: false
readOnlyPort: 0
resolvConf: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[3]s}
authorization: {mode: Webhook}
tlsCertFile: %[4]s
tlsPrivateKeyFile: %[5]s
staticPodPath: %[6]s
podLogsDir: %[7]s
volumePluginDir: %[8]s
serializeImagePulls: false
maxPods: 60
shutdownGracePeriod: 0s
`, containerdSock, NodeIP, caFile, certFile, keyFile, filepath.Join(dir, "manifests"), filepath.Join(dir, "pods"),
		filepath.Join(dir, "volumes"))
}

// kubeProxyConfigYAML runs kube-proxy in iptables mode inside the namespace. masqueradeAll sends Service traffic
// back through the node, so replies between pods on one bridge need no br_netfilter; the conntrack sizes are left
// alone, because nf_conntrack_max is the whole machine's.
func kubeProxyConfigYAML(kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
mode: iptables
hostnameOverride: %[2]s
clusterCIDR: %[3]s
bindAddress: %[4]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables:
  masqueradeAll: true
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, NodeName, PodCIDR, NodeIP)
}
