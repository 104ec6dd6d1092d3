package cluster_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/cluster"
)

// The failover step's Endpoint: two targets, each a single-replica Deployment and Service of the demo upstream,
// which answers a chat completion with the model it was asked for. Each target asks for its own name as its
// targetModel, so an answer's "model" says which target served it.
const (
	failoverSlug     = "tour/failover"
	failoverVictim   = "failover-a"
	failoverSurvivor = "failover-b"
	// failoverCallers call the slug without pause, for failoverBefore before the victim's pod is deleted and
	// failoverAfter after.
	failoverCallers = 4
	failoverBefore  = 8 * time.Second
	failoverAfter   = 20 * time.Second
)

// failoverOnPodDeletion deletes one target's pod (grace period 0: its address goes away at once) while clients
// call the Endpoint through gatewayd's Service without pause. No call may fail: a try that meets the gone pod (a
// refused or reset connection, or no answer) is followed by a try of the other target (the gatewayd/failover row
// of docs/architecture.md), and the calls made after the deletion are answered by the other target.
func (tr *tour) failoverOnPodDeletion(t *testing.T) {
	ns := cluster.WorkspaceNamespace
	var targets []gatewayv1.EndpointTarget
	for _, name := range []string{failoverVictim, failoverSurvivor} {
		labels := map[string]string{"app.kubernetes.io/name": name}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ServiceSpec{
			Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}}}}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{
					Name: "upstream", Image: cluster.DemoUpstreamImage, ImagePullPolicy: corev1.PullNever,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1,
						ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
				}},
			}},
		}}
		tr.createAll(t, svc, dep)
		// No cluster DNS (docs/cluster.md): the target names the Service's ClusterIP, as kube-proxy routes it.
		targets = append(targets, gatewayv1.EndpointTarget{Name: name, Provider: gatewayv1.ProviderOpenAI,
			BaseURL: "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "8080") + "/v1", TargetModel: name})
	}
	tr.createAll(t, &gatewayv1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: "tour-failover", Namespace: ns},
		Spec: gatewayv1.EndpointSpec{Slug: failoverSlug, Targets: targets}})
	for _, name := range []string{failoverVictim, failoverSurvivor} {
		tr.waitDeploymentReady(t, name, "")
	}

	chat := func() (answer, error) {
		return tr.do(http.MethodPost, "/v1/chat/completions", "Bearer "+tr.p.APIKey, map[string]any{
			"model": failoverSlug, "messages": []map[string]string{{"role": "user", "content": "steady"}}}, nil)
	}
	eventually(t, 2*time.Minute, "both targets answering through gatewayd", func() error {
		seen := map[string]bool{}
		for range 20 {
			a, err := chat()
			if err != nil || a.code != http.StatusOK {
				return fmt.Errorf("%s (%v)", a, err)
			}
			m, _ := a.body["model"].(string)
			seen[m] = true
		}
		if !seen[failoverVictim] || !seen[failoverSurvivor] {
			return fmt.Errorf("20 calls answered by %v only", seen)
		}
		return nil
	})

	triesBefore := tr.failoverTries(t)
	// Each answered call, by the target that answered and whether it started after the deletion.
	var (
		mu        sync.Mutex
		deletedAt time.Time
		served    = map[string][2]int{} // target -> {started before the deletion, started after}
		slowest   time.Duration
	)
	load := startLoad(failoverCallers, func() (answer, error) {
		mu.Lock()
		after := !deletedAt.IsZero()
		mu.Unlock()
		start := time.Now()
		a, err := chat()
		took := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		slowest = max(slowest, took)
		if err == nil && a.code == http.StatusOK {
			m, _ := a.body["model"].(string)
			n := served[m]
			if after {
				n[1]++
			} else {
				n[0]++
			}
			served[m] = n
		}
		return a, err
	})
	stopped := false
	defer func() {
		if !stopped {
			load.stop()
		}
	}()
	time.Sleep(failoverBefore)
	pods := &corev1.PodList{}
	if err := tr.p.Client.List(tr.ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": failoverVictim}); err != nil || len(pods.Items) != 1 {
		t.Fatalf("the pods of %s: %v (%d)", failoverVictim, err, len(pods.Items))
	}
	victim := pods.Items[0]
	mu.Lock()
	deletedAt = time.Now()
	mu.Unlock()
	if err := tr.p.Client.Delete(tr.ctx, &victim, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(failoverAfter)
	load.stop()
	stopped = true

	mu.Lock()
	defer mu.Unlock()
	t.Logf("figure: target %s's pod deleted (grace period 0) under %d callers of an Endpoint of two targets: %d calls answered, %d failed; answered before/after the deletion by %s %d/%d, by %s %d/%d; slowest call %s",
		failoverVictim, failoverCallers, load.ok.Load(), load.failed.Load(), failoverVictim, served[failoverVictim][0], served[failoverVictim][1],
		failoverSurvivor, served[failoverSurvivor][0], served[failoverSurvivor][1], slowest.Round(time.Millisecond))
	triesAfter := tr.failoverTries(t)
	t.Logf("gatewayd's tries of the Endpoint's targets during the load, by outcome: %s", triesAfter.since(triesBefore))
	if n := load.failed.Load(); n > 0 {
		t.Errorf("%d calls failed while a target's pod was deleted (%d answered), for example: %v", n, load.ok.Load(), load.samples())
	}
	if served[failoverVictim][0] == 0 || served[failoverSurvivor][0] == 0 {
		t.Errorf("before the deletion the calls were answered by %v; want both targets", served)
	}
	// The deletion was met: tries of the victim failed, and their calls were answered all the same.
	if triesAfter.failed(failoverVictim) <= triesBefore.failed(failoverVictim) {
		t.Errorf("no try of %s failed during the load: the calls never met the deleted pod", failoverVictim)
	}
	if served[failoverSurvivor][1] == 0 {
		t.Errorf("no call started after the deletion was answered by %s: %v", failoverSurvivor, served)
	}
	// The Deployment brings the victim's pod back.
	tr.waitDeploymentReady(t, failoverVictim, victim.Name)
}

// waitDeploymentReady waits until the workspace's Deployment name has a Ready pod not named gone.
func (tr *tour) waitDeploymentReady(t *testing.T, name, gone string) {
	t.Helper()
	eventually(t, 3*time.Minute, "a Ready pod of Deployment "+name, func() error {
		pods := &corev1.PodList{}
		if err := tr.p.Client.List(tr.ctx, pods, client.InNamespace(cluster.WorkspaceNamespace), client.MatchingLabels{"app.kubernetes.io/name": name}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Name != gone && p.DeletionTimestamp == nil && podIsReady(p) {
				return nil
			}
		}
		return fmt.Errorf("no Ready pod among %d", len(pods.Items))
	})
}

// failoverTries reads modelgate_upstream_tries_total of the failover Endpoint from GET /v1/metrics: each
// target's tries by outcome.
func (tr *tour) failoverTries(t *testing.T) tries {
	t.Helper()
	m := tr.admin(t, http.MethodGet, "/v1/metrics", nil)
	if m.code != http.StatusOK {
		t.Fatalf("GET /v1/metrics: %d %.300s", m.code, m.raw)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(m.raw))
	if err != nil {
		t.Fatalf("GET /v1/metrics could not be parsed: %v", err)
	}
	out := tries{}
	for _, s := range families["modelgate_upstream_tries_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["slug"] == failoverSlug {
			out[labels["target"]+" "+labels["outcome"]] = s.GetCounter().GetValue()
		}
	}
	return out
}

// tries counts tries by "<target> <outcome>".
type tries map[string]float64

// failed is target's failed tries: every outcome but ok and canceled.
func (ts tries) failed(target string) float64 {
	var n float64
	for k, v := range ts {
		if name, outcome, _ := strings.Cut(k, " "); name == target && outcome != "ok" && outcome != "canceled" {
			n += v
		}
	}
	return n
}

// since lists the tries counted after before, as "<target> <outcome>=<count>".
func (ts tries) since(before tries) string {
	var out []string
	for k, v := range ts {
		if d := v - before[k]; d > 0 {
			out = append(out, fmt.Sprintf("%s=%g", k, d))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
