package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/modelgate/modelgate/test/chart/helmtest"
)

// checkMonitoring: the PrometheusRule holds the groups of files/prometheus-rules.yaml as they are, the Grafana
// ConfigMap holds files/grafana-dashboard.json under the sidecar's label, and gatewayd's ServiceMonitor keeps the
// workspace's namespace label. test/monitoring checks those files themselves.
func checkMonitoring(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	rule := helmtest.Find(objs, "PrometheusRule", "modelgate")
	if rule == nil {
		t.Fatal("No PrometheusRule modelgate")
	}
	if rule.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule labels = %v, want the values' release label", rule.GetLabels())
	}
	got, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if diff := cmp.Diff(ruleGroups(t), got); diff != "" {
		t.Errorf("PrometheusRule groups differ from files/prometheus-rules.yaml (-file +rendered):\n%s", diff)
	}

	cm := helmtest.Find(objs, "ConfigMap", "modelgate-grafana-dashboard")
	if cm == nil {
		t.Fatal("No ConfigMap modelgate-grafana-dashboard")
	}
	if cm.GetLabels()["grafana_dashboard"] != "1" || cm.GetAnnotations()["grafana_folder"] != "modelgate" {
		t.Errorf("Dashboard ConfigMap labels %v, annotations %v: want grafana_dashboard=1 and the values' folder", cm.GetLabels(), cm.GetAnnotations())
	}
	dashboard, _, _ := unstructured.NestedString(cm.Object, "data", "modelgate.json")
	if want := chartFile(t, "grafana-dashboard.json"); dashboard != strings.TrimRight(want, "\n") {
		t.Errorf("The dashboard ConfigMap does not hold files/grafana-dashboard.json as it is:\n%s", lineDiff(want, dashboard))
	}

	sm := helmtest.Find(objs, "ServiceMonitor", "modelgate-gatewayd")
	if eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints"); len(eps) != 1 || eps[0].(map[string]any)["honorLabels"] != true {
		t.Errorf("gatewayd ServiceMonitor endpoints = %v, want honorLabels: its namespace label is the workspace", eps)
	}
}

// TestPrometheusRuleWithoutLeaderElection: with leader election off no manager replica ever leads, so the
// PrometheusRule leaves the manager's alert out rather than firing it forever.
func TestPrometheusRuleWithoutLeaderElection(t *testing.T) {
	for _, c := range []struct {
		leaderElection string
		want           []string
	}{
		{"true", []string{"modelgate-gatewayd", "modelgate-manager"}},
		{"false", []string{"modelgate-gatewayd"}},
	} {
		objs := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace,
			"--set", "metrics.prometheusRule.enabled=true,manager.leaderElection.enabled="+c.leaderElection))
		rule := helmtest.Find(objs, "PrometheusRule", "modelgate")
		if rule == nil {
			t.Fatal("No PrometheusRule with metrics.prometheusRule.enabled=true")
		}
		groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
		var names []string
		for _, g := range groups {
			names = append(names, g.(map[string]any)["name"].(string))
		}
		if !cmp.Equal(names, c.want) {
			t.Errorf("leaderElection.enabled=%s: rule groups %v, want %v", c.leaderElection, names, c.want)
		}
	}
}

// ruleGroups are the groups of files/prometheus-rules.yaml, decoded as a rendered document is.
func ruleGroups(t *testing.T) []any {
	t.Helper()
	var file struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.Unmarshal([]byte(chartFile(t, "prometheus-rules.yaml")), &file); err != nil {
		t.Fatalf("Failed to decode files/prometheus-rules.yaml: %v", err)
	}
	if len(file.Groups) == 0 {
		t.Fatal("files/prometheus-rules.yaml has no groups")
	}
	return file.Groups
}

func chartFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(helmtest.Root(t), helmtest.ChartDir, "files", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
