// Package monitoring checks what an operator installs to watch modelgate, the chart's files/prometheus-rules.yaml
// and files/grafana-dashboard.json (docs/operations.md, Alerts): the rules pass promtool and fire as its unit
// tests expect; every PromQL expression of the rules and the dashboard parses with Prometheus's own parser and
// selects series that gatewayd or the manager export after a tour of calls; and a real Prometheus server that
// scrapes a real gatewayd fires the target-down alert once a target's upstream refuses.
package monitoring

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/modelgate/modelgate/test/stack"
)

// ruleFile is Prometheus's rule file format, as much of it as the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
			For   string `json:"for,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// query is one PromQL expression of the rules or the dashboard, and where it comes from.
type query struct {
	where, expr string
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := stack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// chartFile is the path of a file under charts/modelgate/files.
func chartFile(t *testing.T, name string) string {
	return filepath.Join(root(t), "charts", "modelgate", "files", name)
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(chartFile(t, "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("Failed to decode the rules: %v", err)
	}
	return f
}

// queries are the expressions of every alert and of every panel target of the dashboard. The dashboard's
// $workspace variable becomes the regular expression of its All value, as Grafana sends it.
func queries(t *testing.T) []query {
	t.Helper()
	var out []query
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			out = append(out, query{"alert " + r.Alert, r.Expr})
		}
	}
	b, err := os.ReadFile(chartFile(t, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Type, Title string
			Targets     []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("Failed to decode the dashboard: %v", err)
	}
	panels := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("Dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, query{"panel " + p.Title + " " + tg.RefID, strings.ReplaceAll(tg.Expr, "$workspace", ".*")})
		}
	}
	if panels == 0 {
		t.Fatal("The dashboard has no panels")
	}
	return out
}

// TestQueriesParse parses every expression with Prometheus's own parser.
func TestQueriesParse(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	for _, q := range queries(t) {
		if _, err := p.ParseExpr(q.expr); err != nil {
			t.Errorf("%s does not parse: %v\n%s", q.where, err, q.expr)
		}
	}
	// Control: the parser refuses what Prometheus would.
	if _, err := p.ParseExpr(`sum by (workspace (rate(modelgate_upstream_tries_total[5m]))`); err == nil {
		t.Fatal("The parser accepted an unbalanced expression")
	}
}

// TestPromtoolRules runs promtool on the rules: check rules, and the unit tests of testdata/alerts.test.yaml
// (one per alert).
func TestPromtoolRules(t *testing.T) {
	promtool := lookPath(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", chartFile(t, "prometheus-rules.yaml")},
		{"test", "rules", "alerts.test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Join(root(t), "test", "monitoring", "testdata")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert has its unit test.
	tests, err := os.ReadFile(filepath.Join(root(t), "test", "monitoring", "testdata", "alerts.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("Alert %s has no test in testdata/alerts.test.yaml", r.Alert)
			}
		}
	}
}

// lookPath finds a binary of Debian's prometheus package, or skips: CI installs it (.ci/run).
func lookPath(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("SKIPPED: %s is not installed (Debian's prometheus package brings it: apt-get install prometheus; .ci/run installs it)", name)
	}
	return path
}
