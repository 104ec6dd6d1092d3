package monitoring

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/test/stack"
	"github.com/modelgate/modelgate/test/upstream"
)

// notYetExported are series the dashboard reads that gatewayd does not export yet. The test fails once one is
// exported, so that it leaves this list.
var notYetExported = map[string]bool{}

// Names of the Endpoint the tour breaks.
const (
	downEndpoint = "monitoring-down"
	downSlug     = "monitoring/down"
	downTarget   = "down-a"
)

// TestTour runs the whole product (test/stack: API server, manager, gatewayd, demo upstreams) and a manager
// replica that wins the leader election, makes calls that succeed, stream, go async, fail and get refused, and
// then checks that every series the alerts and the dashboard select is among what gatewayd's /metrics and the
// manager's registry export, with the labels they group by. In between, a real Prometheus server scrapes
// gatewayd with the rules loaded and fires ModelgateTargetDown once the Endpoint's upstream refuses.
func TestTour(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: this test needs envtest binaries (make envtest)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{})
	if err != nil {
		t.Fatalf("Failed to start the local stack: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	electLeader(ctx, t, s)
	auth := "Bearer " + s.APIKey

	// An Endpoint of its own, whose one target the tour breaks: out of rotation at its first failed try, for
	// longer than the test.
	up := upstream.New(upstream.Options{})
	t.Cleanup(up.Close)
	ep := &gatewayv1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Name: downEndpoint, Namespace: s.Namespace},
		Spec: gatewayv1.EndpointSpec{
			Slug: downSlug,
			// An upstream that needs no key: the stack's upstream Secret may go only to the stack's own upstream.
			// Priced, so that its calls export the cost series the dashboard reads.
			Targets: []gatewayv1.EndpointTarget{{Name: downTarget, Provider: gatewayv1.ProviderOpenAI, BaseURL: up.BaseURL(), TargetModel: "echo",
				Pricing: &gatewayv1.EndpointPricing{InputPerMillionTokens: "1.25", OutputPerMillionTokens: "10"}}},
			Retry:    &gatewayv1.EndpointRetry{Attempts: ptr.To[int32](0)},
			Cooldown: &gatewayv1.EndpointCooldown{Failures: 1, Duration: &metav1.Duration{Duration: time.Hour}},
		},
	}
	if err := s.Client.Create(ctx, ep); err != nil {
		t.Fatal(err)
	}
	chat := func(slug string, extra map[string]any) response {
		body := map[string]any{"model": slug, "messages": []any{map[string]any{"role": "user", "content": "hello world"}}}
		for k, v := range extra {
			body[k] = v
		}
		return send(t, http.MethodPost, s.GatewayURL+"/v1/chat/completions", auth, body)
	}
	until(t, "the Endpoint "+downEndpoint+" to serve", func() bool { return chat(downSlug, nil).code == http.StatusOK })
	if r := chat(stack.EndpointSlug, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}); r.code != http.StatusOK {
		t.Fatalf("A streamed call: %s", r)
	}
	asyncCall(t, s, auth)

	t.Run("PrometheusFiresTargetDown", func(t *testing.T) {
		prom := startPrometheus(t, strings.TrimPrefix(s.MetricsURL, "http://"))
		series := `modelgate_upstream_target_up{slug="` + downSlug + `",target="` + downTarget + `"}`
		until(t, "Prometheus to scrape "+series+" at 1", func() bool { return prom.value(t, series) == "1" })
		// Control: rules evaluated on a target in rotation do not fire.
		seen := time.Now()
		until(t, "two evaluations of the rules after the scrape", func() bool { return prom.evaluatedSince(t, "modelgate-gatewayd", seen, 2) })
		if a := prom.alert(t, "ModelgateTargetDown", downSlug); a != nil {
			t.Fatalf("ModelgateTargetDown is %s while the target is in rotation: %+v", a.State, a)
		}
		up.Close()
		if r := chat(downSlug, nil); r.code == http.StatusOK {
			t.Fatalf("A call of a target whose upstream is closed: %s", r)
		}
		until(t, "ModelgateTargetDown to fire", func() bool {
			a := prom.alert(t, "ModelgateTargetDown", downSlug)
			return a != nil && a.State == "firing" && a.Labels["target"] == downTarget && a.Labels["workspace"] == s.Namespace
		})
	})

	// A workspace key held to one call a minute: the next call is refused by the model-API tier.
	var ws gatewayv1.Workspace
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: stack.WorkspaceName}, &ws); err != nil {
		t.Fatal(err)
	}
	ws.Spec.ModelAPILimits = &gatewayv1.ModelAPILimits{RequestsPerMinute: 1}
	if err := s.Client.Update(ctx, &ws); err != nil {
		t.Fatal(err)
	}
	until(t, "a call refused by the workspace's modelAPILimits", func() bool { return chat(stack.EndpointSlug, nil).code == http.StatusTooManyRequests })

	samples := scrape(t, s.MetricsURL+"/metrics")
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		samples = append(samples, flatten(f)...)
	}
	checkSelected(t, samples)
}

// electLeader runs a manager replica that competes for the manager's Lease, as cmd/manager does, until it leads:
// the leader_election_master_status series of the manager's alert.
func electLeader(ctx context.Context, t *testing.T, s *stack.Stack) {
	t.Helper()
	mgr, err := ctrl.NewManager(s.Config, ctrl.Options{
		Scheme: stack.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaderElection: true, LeaderElectionID: controllers.LeaderElectionID, LeaderElectionNamespace: s.Namespace,
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
	select {
	case <-mgr.Elected():
	case err := <-done:
		t.Fatalf("The manager replica stopped before it led: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("The manager replica did not win the leader election within a minute")
	}
}

// asyncCall sends one async predict call of the seeded model with a result webhook, and waits for the webhook.
func asyncCall(t *testing.T, s *stack.Stack, auth string) {
	t.Helper()
	got := make(chan struct{}, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	url := s.GatewayURL + "/models/" + stack.ModelName + "/production/async_predict"
	until(t, "an async predict call to be accepted", func() bool {
		return send(t, http.MethodPost, url, auth, map[string]any{"model_input": map[string]any{"text": "I love it"},
			"webhook_endpoint": recv.URL + "/hook"}).code == http.StatusCreated
	})
	select {
	case <-got:
	case <-time.After(time.Minute):
		t.Fatal("The async result webhook never arrived")
	}
}

// sample is one exported series.
type sample struct {
	name   string
	labels map[string]string
}

func (s sample) matches(ms []*labels.Matcher) bool {
	for _, m := range ms {
		v := s.labels[m.Name]
		if m.Name == model.MetricNameLabel {
			v = s.name
		}
		if !m.Matches(v) {
			return false
		}
	}
	return true
}

// checkSelected: every selector of every query selects an exported series, and every label a query aggregates
// by is on some series its selectors select.
func checkSelected(t *testing.T, samples []sample) {
	t.Helper()
	selected := func(ms []*labels.Matcher) []sample {
		var out []sample
		for _, s := range samples {
			if s.matches(ms) {
				out = append(out, s)
			}
		}
		return out
	}
	exported := map[string]bool{}
	for _, s := range samples {
		exported[s.name] = true
	}
	for name := range notYetExported {
		if exported[name] {
			t.Errorf("%s is exported now: remove it from notYetExported", name)
		}
	}
	p := parser.NewParser(parser.Options{})
	for _, q := range queries(t) {
		expr, err := p.ParseExpr(q.expr)
		if err != nil {
			t.Errorf("%s does not parse: %v", q.where, err)
			continue
		}
		for _, ms := range parser.ExtractSelectors(expr) {
			if len(selected(ms)) == 0 && !pending(ms) {
				t.Errorf("%s: no exported series matches %v", q.where, ms)
			}
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			agg, ok := n.(*parser.AggregateExpr)
			if !ok || agg.Without {
				return nil
			}
			for _, l := range agg.Grouping {
				found, pend := false, false
				for _, ms := range parser.ExtractSelectors(agg.Expr) {
					pend = pend || pending(ms)
					found = found || slices.ContainsFunc(selected(ms), func(s sample) bool { _, ok := s.labels[l]; return ok })
				}
				if !found && !pend {
					t.Errorf("%s: aggregates by %q, which no series it selects has", q.where, l)
				}
			}
			return nil
		})
	}
}

func pending(ms []*labels.Matcher) bool {
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && notYetExported[m.Value] {
			return true
		}
	}
	return false
}

// scrape reads a /metrics answer.
func scrape(t *testing.T, url string) []sample {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("Failed to parse %s: %v", url, err)
	}
	var out []sample
	for _, f := range families {
		out = append(out, flatten(f)...)
	}
	return out
}

// flatten gives the series of a family as Prometheus stores them: a histogram's _bucket (with le), _sum and
// _count.
func flatten(f *dto.MetricFamily) []sample {
	var out []sample
	for _, m := range f.GetMetric() {
		lbls := map[string]string{}
		for _, l := range m.GetLabel() {
			lbls[l.GetName()] = l.GetValue()
		}
		with := func(name, extra, value string) sample {
			s := sample{name: name, labels: map[string]string{}}
			for k, v := range lbls {
				s.labels[k] = v
			}
			if extra != "" {
				s.labels[extra] = value
			}
			return s
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			for _, b := range m.GetHistogram().GetBucket() {
				out = append(out, with(f.GetName()+"_bucket", "le", fmt.Sprint(b.GetUpperBound())))
			}
			out = append(out, with(f.GetName()+"_bucket", "le", "+Inf"), with(f.GetName()+"_sum", "", ""), with(f.GetName()+"_count", "", ""))
		case dto.MetricType_SUMMARY:
			out = append(out, with(f.GetName()+"_sum", "", ""), with(f.GetName()+"_count", "", ""))
			for _, q := range m.GetSummary().GetQuantile() {
				out = append(out, with(f.GetName(), "quantile", fmt.Sprint(q.GetQuantile())))
			}
		default:
			out = append(out, with(f.GetName(), "", ""))
		}
	}
	return out
}

// prometheus is a running Prometheus server.
type prometheus struct{ url string }

// startPrometheus runs Debian's prometheus on loopback, scraping gatewayd's metrics at target every second with
// the chart's rules loaded, each with its for shortened to 0s.
func startPrometheus(t *testing.T, target string) prometheus {
	t.Helper()
	bin := lookPath(t, "prometheus")
	dir := t.TempDir()
	raw, err := os.ReadFile(chartFile(t, "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if _, ok := r.(map[string]any)["for"]; ok {
				r.(map[string]any)["for"] = "0s"
			}
		}
	}
	write := func(name string, v any) {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("rules.yaml", rules)
	write("prometheus.yml", map[string]any{
		"global":         map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"},
		"rule_files":     []string{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": []any{map[string]any{"job_name": "gatewayd", "static_configs": []any{map[string]any{"targets": []string{target}}}}},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := prometheus{url: "http://" + addr}
	until(t, "Prometheus to be ready", func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// value is the value of the one series expr selects at the latest evaluation, "" when it selects none.
func (p prometheus) value(t *testing.T, expr string) string {
	t.Helper()
	var out struct {
		Data struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(expr), &out)
	if len(out.Data.Result) != 1 || len(out.Data.Result[0].Value) != 2 {
		return ""
	}
	v, _ := out.Data.Result[0].Value[1].(string)
	return v
}

// evaluatedSince reports whether the rule group has been evaluated n times since t0, going by its last
// evaluation and its interval.
func (p prometheus) evaluatedSince(t *testing.T, group string, t0 time.Time, n int) bool {
	t.Helper()
	var out struct {
		Data struct {
			Groups []struct {
				Name           string    `json:"name"`
				Interval       float64   `json:"interval"`
				LastEvaluation time.Time `json:"lastEvaluation"`
			} `json:"groups"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/rules", &out)
	for _, g := range out.Data.Groups {
		if g.Name == group {
			return g.LastEvaluation.After(t0.Add(time.Duration(float64(n-1) * g.Interval * float64(time.Second))))
		}
	}
	return false
}

type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// alert is the alert of name for slug as Prometheus's API lists it, nil when none is pending or firing.
func (p prometheus) alert(t *testing.T, name, slug string) *alert {
	t.Helper()
	var out struct {
		Data struct {
			Alerts []alert `json:"alerts"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/alerts", &out)
	for _, a := range out.Data.Alerts {
		if a.Labels["alertname"] == name && a.Labels["slug"] == slug {
			return &a
		}
	}
	return nil
}

func (p prometheus) get(t *testing.T, path string, into any) {
	t.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// response is one HTTP answer.
type response struct {
	code int
	body []byte
}

func (r response) String() string { return fmt.Sprintf("HTTP %d: %s", r.code, bytes.TrimSpace(r.body)) }

// send makes one JSON call.
func send(t *testing.T, method, url, authorization string, body any) response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", authorization)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, body: out}
}

// until polls cond every 200 ms for up to two minutes.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("Gave up waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
