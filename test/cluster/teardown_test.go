package cluster

import "testing"

// The teardown kills what the cluster started, and nothing that only shares the start of its directory's name.
func TestNamesDir(t *testing.T) {
	const dir = "/tmp/modelgate-cluster"
	for _, c := range []struct {
		cmdline string
		want    bool
	}{
		{"containerd\x00--config\x00/tmp/modelgate-cluster/containerd.toml\x00", true},
		{"kubelet\x00--config=/tmp/modelgate-cluster/kubelet.yaml\x00", true},
		{"shim\x00-address\x00/tmp/modelgate-cluster\x00", true},
		{"shim\x00-address=/tmp/modelgate-cluster\x00", true},
		{"flock\x00/tmp/modelgate-cluster.lock\x00make\x00test-cluster\x00", false},
		{"sleep\x00/tmp/modelgate-cluster-old/x\x00", false},
		{"bash\x00-c\x00echo hi\x00", false},
	} {
		if got := namesDir(c.cmdline, dir); got != c.want {
			t.Errorf("namesDir(%q) = %v, want %v", c.cmdline, got, c.want)
		}
	}
}
