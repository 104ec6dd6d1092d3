package controllers_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/testutil"
)

// envtest runs an API server and etcd only: no kubelet starts pods and no kube-controller-manager writes a
// Deployment's status, fills a Service's EndpointSlices or collects garbage. Where a spec needs what they would
// do, it writes it itself, through the same subresources they use.

func containerDeployment(ns, name, modelID string) *gatewayv1.ModelDeployment {
	return &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: modelID, Source: gatewayv1.DeploymentSource{
			Container: &gatewayv1.ContainerSource{Image: "registry.example/echo:1.2.3"}}},
	}
}

func urlDeployment(ns, name, modelID, url string) *gatewayv1.ModelDeployment {
	return &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       gatewayv1.ModelDeploymentSpec{ModelID: modelID, Source: gatewayv1.DeploymentSource{URL: url}},
	}
}

func modelOf(ns, name string, envs ...gatewayv1.ModelEnvironment) *gatewayv1.Model {
	return &gatewayv1.Model{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       gatewayv1.ModelSpec{DisplayName: name, Environments: envs},
	}
}

func getDeployment(ns, name string) func(Gomega) *gatewayv1.ModelDeployment {
	return func(g Gomega) *gatewayv1.ModelDeployment {
		out := &gatewayv1.ModelDeployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, out)).To(Succeed())
		return out
	}
}

func statusOf(ns, name string) func(Gomega) gatewayv1.DeploymentStatus {
	return func(g Gomega) gatewayv1.DeploymentStatus { return getDeployment(ns, name)(g).Status.Status }
}

func getWorkload(ns, name string) func(Gomega) *appsv1.Deployment {
	return func(g Gomega) *appsv1.Deployment {
		out := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, out)).To(Succeed())
		return out
	}
}

func replicasOf(ns, name string) func(Gomega) int32 {
	return func(g Gomega) int32 { return ptr.Deref(getWorkload(ns, name)(g).Spec.Replicas, 1) }
}

// patchDeployment applies a JSON merge patch to a ModelDeployment's spec or metadata, as kubectl patch does.
func patchDeployment(ns, name, patch string) {
	GinkgoHelper()
	md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	Expect(k8s.Patch(ctx, md, client.RawPatch("application/merge-patch+json", []byte(patch)))).To(Succeed())
}

// reportWorkload writes the status the kube-controller-manager's Deployment controller would: it has observed
// the current spec and counts replicas and ready replicas of pods that no kubelet runs here.
func reportWorkload(ns, name string, replicas, ready int32, conds ...appsv1.DeploymentCondition) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		d := getWorkload(ns, name)(g)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas,
			UpdatedReplicas: replicas, ReadyReplicas: ready, AvailableReplicas: ready, Conditions: conds}
		g.Expect(k8s.Status().Update(ctx, d)).To(Succeed())
	}, timeout, poll).Should(Succeed())
}

// eventsOf lists the Events recorded for a ModelDeployment as "Reason: message".
func eventsOf(ns, name string) func(Gomega) []string {
	return func(g Gomega) []string {
		var list corev1.EventList
		g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "ModelDeployment" && e.InvolvedObject.Name == name {
				out = append(out, e.Reason+": "+e.Message)
			}
		}
		return out
	}
}

// expectEvent waits for an Event of the ModelDeployment with this reason whose message contains text.
func expectEvent(ns, name, reason, text string) {
	GinkgoHelper()
	Eventually(eventsOf(ns, name), timeout, poll).Should(ContainElement(And(HavePrefix(reason+": "), ContainSubstring(text))))
}

func isNotFound(obj client.Object) func() bool {
	return func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)) }
}

// healthServer answers GET /health with 200 while healthy, else 500.
func healthServer() (*httptest.Server, *atomic.Bool) {
	healthy := &atomic.Bool{}
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && healthy.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	DeferCleanup(srv.Close)
	return srv, healthy
}

var _ = Describe("ModelDeployment reconciler", func() {
	It("runs a container source as a Deployment and a Service, scales it with active and minReplica, and removes both on delete", func() {
		ns := newNamespace()
		md := containerDeployment(ns, "echo-v1", "echo")
		md.Spec.ReadinessPath = "/ready"
		md.Spec.Source.Container.Port = 9000
		md.Spec.Source.Container.Env = []gatewayv1.EnvVar{
			{Name: "MODEL_NAME", Value: "echo"},
			{Name: "HF_TOKEN", SecretKeyRef: &gatewayv1.SecretKeySelector{Name: "hf", Key: "token"}},
		}
		md.Spec.Source.Container.Resources = &gatewayv1.Resources{
			Requests: map[string]string{"cpu": "500m", "memory": "1Gi"},
			Limits:   map[string]string{"nvidia.com/gpu": "1"},
		}
		Expect(k8s.Create(ctx, md)).To(Succeed())
		wl := "md-echo-v1"

		By("creating the Deployment with the container the source describes")
		Eventually(func(g Gomega) {
			d := getWorkload(ns, wl)(g)
			g.Expect(metav1.IsControlledBy(d, getDeployment(ns, md.Name)(g))).To(BeTrue())
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(d.Spec.Template.Spec.Containers).To(HaveLen(1))
			c := d.Spec.Template.Spec.Containers[0]
			g.Expect(c.Image).To(Equal("registry.example/echo:1.2.3"))
			g.Expect(c.Ports).To(ConsistOf(HaveField("Name", "http")))
			g.Expect(c.Ports[0].ContainerPort).To(BeEquivalentTo(9000))
			for _, p := range []*corev1.Probe{c.ReadinessProbe, c.StartupProbe} {
				g.Expect(p).NotTo(BeNil())
				g.Expect(p.HTTPGet).NotTo(BeNil())
				g.Expect(p.HTTPGet.Path).To(Equal("/ready"))
				g.Expect(p.HTTPGet.Port).To(Equal(intstr.FromString("http")))
			}
			// The startup probe every second, for startupTimeoutSeconds; readiness every 5 s.
			g.Expect(c.StartupProbe.PeriodSeconds).To(BeEquivalentTo(1))
			g.Expect(c.StartupProbe.FailureThreshold).To(BeEquivalentTo(md.Spec.StartupTimeoutSeconds))
			g.Expect(c.ReadinessProbe.PeriodSeconds).To(BeEquivalentTo(5))
			g.Expect(c.Env).To(Equal([]corev1.EnvVar{
				{Name: "MODEL_NAME", Value: "echo"},
				{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "hf"}, Key: "token"}}},
			}))
			g.Expect(c.Resources.Requests.Cpu().Equal(resource.MustParse("500m"))).To(BeTrue())
			g.Expect(c.Resources.Requests.Memory().Equal(resource.MustParse("1Gi"))).To(BeTrue())
			g.Expect(c.Resources.Limits.Name("nvidia.com/gpu", resource.DecimalSI).Equal(resource.MustParse("1"))).To(BeTrue())
		}, timeout, poll).Should(Succeed())

		By("creating the Service that gatewayd routes to, on the port named http")
		Eventually(func(g Gomega) {
			svc := &corev1.Service{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: wl}, svc)).To(Succeed())
			g.Expect(metav1.IsControlledBy(svc, getDeployment(ns, md.Name)(g))).To(BeTrue())
			g.Expect(svc.Spec.Ports).To(HaveLen(1))
			g.Expect(svc.Spec.Ports[0].Name).To(Equal("http"))
			g.Expect(svc.Spec.Ports[0].Port).To(BeEquivalentTo(9000))
			g.Expect(svc.Spec.Ports[0].TargetPort).To(Equal(intstr.FromString("http")))
		}, timeout, poll).Should(Succeed())

		By("labelling the ModelDeployment with its model and holding it with the finalizer")
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Labels).To(HaveKeyWithValue(gatewayv1.LabelModel, "echo"))
			g.Expect(got.Finalizers).To(ContainElement(gatewayv1.ModelDeploymentFinalizer))
			g.Expect(got.Status.Service).To(Equal(wl))
			g.Expect(got.Status.PortName).To(Equal("http"))
		}, timeout, poll).Should(Succeed())
		expectEvent(ns, md.Name, "CreatedDeployment", wl)
		expectEvent(ns, md.Name, "CreatedService", wl)

		By("scaling to 0 when deactivated and back to 1 when activated")
		patchDeployment(ns, md.Name, `{"spec":{"active":false}}`)
		Eventually(replicasOf(ns, wl), timeout, poll).Should(BeEquivalentTo(0))
		patchDeployment(ns, md.Name, `{"spec":{"active":true}}`)
		Eventually(replicasOf(ns, wl), timeout, poll).Should(BeEquivalentTo(1))

		By("running minReplica replicas")
		patchDeployment(ns, md.Name, `{"spec":{"autoscaling":{"minReplica":2,"maxReplica":2}}}`)
		Eventually(replicasOf(ns, wl), timeout, poll).Should(BeEquivalentTo(2))

		By("deleting the Deployment and the Service before the ModelDeployment goes (no garbage collector here)")
		Expect(k8s.Delete(ctx, md)).To(Succeed())
		Eventually(isNotFound(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: wl}}), timeout, poll).Should(BeTrue())
		Eventually(isNotFound(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: wl}}), timeout, poll).Should(BeTrue())
		Eventually(isNotFound(&gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: md.Name}}), timeout, poll).Should(BeTrue())
	})

	It("derives the status table from what the Deployment reports, with an Event for each transition", func() {
		ns := newNamespace()
		md := containerDeployment(ns, "table", "echo")
		Expect(k8s.Create(ctx, md)).To(Succeed())
		wl := md.WorkloadName()

		By("DEPLOYING while no pod exists")
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusDeploying))
		expectEvent(ns, md.Name, "Deploying", "(new) → DEPLOYING")

		By("LOADING_MODEL while a pod runs but is not ready")
		reportWorkload(ns, wl, 1, 0)
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusLoadingModel))
		expectEvent(ns, md.Name, "LoadingModel", "DEPLOYING → LOADING_MODEL")

		By("ACTIVE, Ready and one active replica once it is ready")
		reportWorkload(ns, wl, 1, 1)
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).To(Equal(gatewayv1.StatusActive))
			g.Expect(got.Status.ActiveReplicaCount).To(BeEquivalentTo(1))
			g.Expect(got.Status.ReadySince).NotTo(BeNil())
			g.Expect(readyReason(got.Status.Conditions)).To(Equal("True/Active"))
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		}, timeout, poll).Should(Succeed())
		expectEvent(ns, md.Name, "Active", "LOADING_MODEL → ACTIVE: 1 replica(s) ready.")

		By("UNHEALTHY when the replica stops being ready")
		reportWorkload(ns, wl, 1, 0)
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).To(Equal(gatewayv1.StatusUnhealthy))
			g.Expect(got.Status.ActiveReplicaCount).To(BeEquivalentTo(0))
			g.Expect(readyReason(got.Status.Conditions)).To(Equal("False/NoReadyReplica"))
		}, timeout, poll).Should(Succeed())
		expectEvent(ns, md.Name, "NoReadyReplica", "ACTIVE → UNHEALTHY")
		Eventually(func(g Gomega) {
			var list corev1.EventList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			i := slices.IndexFunc(list.Items, func(e corev1.Event) bool { return e.Reason == "NoReadyReplica" })
			g.Expect(i).NotTo(Equal(-1))
			g.Expect(list.Items[i].Type).To(Equal(corev1.EventTypeWarning))
		}, timeout, poll).Should(Succeed())

		By("DEACTIVATING while the pod stops, then INACTIVE")
		patchDeployment(ns, md.Name, `{"spec":{"active":false}}`)
		Eventually(replicasOf(ns, wl), timeout, poll).Should(BeEquivalentTo(0))
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusDeactivating))
		expectEvent(ns, md.Name, "Deactivating", "UNHEALTHY → DEACTIVATING")
		reportWorkload(ns, wl, 0, 0)
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusInactive))
		expectEvent(ns, md.Name, "Inactive", "DEACTIVATING → INACTIVE")

		By("deploying again when activated")
		patchDeployment(ns, md.Name, `{"spec":{"active":true}}`)
		Eventually(replicasOf(ns, wl), timeout, poll).Should(BeEquivalentTo(1))
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).To(Equal(gatewayv1.StatusDeploying))
			// A new attempt: not "ready once" until it is ready again.
			g.Expect(got.Status.ReadySince).To(BeNil())
		}, timeout, poll).Should(Succeed())
		reportWorkload(ns, wl, 1, 1)
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusActive))

		By("SCALED_TO_ZERO when asked to scale down an ever-ready deployment")
		scaledDownAt := time.Now().UTC().Add(-time.Minute)
		patchDeployment(ns, md.Name, `{"metadata":{"annotations":{"`+gatewayv1.AnnotationScaledDownAt+`":"`+scaledDownAt.Format(time.RFC3339)+`"}}}`)
		Eventually(replicasOf(ns, wl), timeout, poll).Should(BeEquivalentTo(0))
		reportWorkload(ns, wl, 0, 0)
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).To(Equal(gatewayv1.StatusScaledToZero))
			g.Expect(got.Status.ActiveReplicaCount).To(BeEquivalentTo(0))
			// Healthy: Ready stays True (the next call wakes it and is served), with its own reason.
			g.Expect(readyReason(got.Status.Conditions)).To(Equal("True/ScaledToZero"))
		}, timeout, poll).Should(Succeed())
		expectEvent(ns, md.Name, "ScaledToZero", "ACTIVE → SCALED_TO_ZERO")

		By("WAKING_UP when a wake is asked after the scale-down, ACTIVE once a replica is ready")
		patchDeployment(ns, md.Name, `{"metadata":{"annotations":{"`+gatewayv1.AnnotationWakeRequestedAt+`":"`+scaledDownAt.Add(time.Second).Format(time.RFC3339)+`"}}}`)
		Eventually(replicasOf(ns, wl), timeout, poll).Should(BeEquivalentTo(1))
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusWakingUp))
		expectEvent(ns, md.Name, "WakingUp", "SCALED_TO_ZERO → WAKING_UP")
		reportWorkload(ns, wl, 1, 1)
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusActive))
	})

	It("never scales down a deployment that has not been ready once", func() {
		ns := newNamespace()
		md := containerDeployment(ns, "never-ready", "echo")
		md.Annotations = map[string]string{gatewayv1.AnnotationScaledDownAt: time.Now().UTC().Format(time.RFC3339)}
		Expect(k8s.Create(ctx, md)).To(Succeed())
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusDeploying))
		Consistently(replicasOf(ns, md.WorkloadName()), time.Second, poll).Should(BeEquivalentTo(1))
	})

	It("reports DEPLOY_FAILED when the rollout exceeds its deadline before ever being ready, and retries on a new retryNonce", func() {
		ns := newNamespace()
		md := containerDeployment(ns, "failing", "echo")
		Expect(k8s.Create(ctx, md)).To(Succeed())
		wl := md.WorkloadName()
		Eventually(func(g Gomega) string {
			return getWorkload(ns, wl)(g).Spec.Template.Annotations["gateway.modelgate.io/retry-nonce"]
		}, timeout, poll).Should(Equal("0"))

		reportWorkload(ns, wl, 1, 0, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing,
			Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
			Message: `ReplicaSet "md-failing-5d4" has timed out progressing.`})
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).To(Equal(gatewayv1.StatusDeployFailed))
			g.Expect(readyReason(got.Status.Conditions)).To(Equal("False/ProgressFailed"))
			c := meta.FindStatusCondition(got.Status.Conditions, gatewayv1.ConditionReady)
			g.Expect(c.Message).To(ContainSubstring("has timed out progressing"))
		}, timeout, poll).Should(Succeed())
		expectEvent(ns, md.Name, "ProgressFailed", "DEPLOYING → DEPLOY_FAILED")

		By("restarting the pods on a new retryNonce, before the Deployment controller has seen the new template")
		patchDeployment(ns, md.Name, `{"spec":{"retryNonce":1}}`)
		Eventually(func(g Gomega) string {
			return getWorkload(ns, wl)(g).Spec.Template.Annotations["gateway.modelgate.io/retry-nonce"]
		}, timeout, poll).Should(Equal("1"))
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).NotTo(Equal(gatewayv1.StatusDeployFailed))
			g.Expect(got.Status.ObservedRetryNonce).To(BeEquivalentTo(1))
		}, timeout, poll).Should(Succeed())
		expectEvent(ns, md.Name, "Retry", "retryNonce 1")

		By("following the new rollout once the Deployment controller reports it")
		reportWorkload(ns, wl, 1, 0, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing,
			Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated"})
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusLoadingModel))
		reportWorkload(ns, wl, 1, 1)
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusActive))
	})

	It("routes a service source to its Service's ready endpoints and scales its scaleTargetRef", func() {
		ns := newNamespace()
		labels := map[string]string{"app": "vllm"}
		target := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vllm"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.9.0"}}},
				},
			},
		}
		Expect(k8s.Create(ctx, target)).To(Succeed())
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vllm"},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
				{Name: "metrics", Port: 9090},
				{Name: "openai", Port: 8000, TargetPort: intstr.FromInt32(8000)},
			}},
		}
		Expect(k8s.Create(ctx, svc)).To(Succeed())
		// The EndpointSlice controller would write these: one pod ready, one starting.
		slice := testutil.EndpointSlice(ns, "vllm-abcde", "vllm", "openai", 8000,
			testutil.Endpoint{Addr: "10.0.0.1", Ready: true}, testutil.Endpoint{Addr: "10.0.0.2"})
		Expect(k8s.Create(ctx, slice)).To(Succeed())

		md := &gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vllm-v1"},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: "llama",
				Autoscaling: &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](2), MaxReplica: ptr.To[int32](4)},
				Source: gatewayv1.DeploymentSource{Service: &gatewayv1.ServiceSource{Name: "vllm", Port: 8000,
					ScaleTargetRef: &gatewayv1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "vllm"}}}},
		}
		Expect(k8s.Create(ctx, md)).To(Succeed())

		By("ACTIVE with the ready endpoints counted and the port's name resolved")
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).To(Equal(gatewayv1.StatusActive))
			g.Expect(got.Status.ActiveReplicaCount).To(BeEquivalentTo(1))
			g.Expect(got.Status.Service).To(Equal("vllm"))
			g.Expect(got.Status.PortName).To(Equal("openai"))
			g.Expect(got.Labels).To(HaveKeyWithValue(gatewayv1.LabelModel, "llama"))
			// Nothing of its own to clean up: no finalizer.
			g.Expect(got.Finalizers).To(BeEmpty())
		}, timeout, poll).Should(Succeed())
		By("scaling the target to minReplica")
		Eventually(replicasOf(ns, "vllm"), timeout, poll).Should(BeEquivalentTo(2))

		By("counting a second ready endpoint")
		Eventually(func(g Gomega) {
			s := &discoveryv1.EndpointSlice{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(slice), s)).To(Succeed())
			s.Endpoints[1].Conditions.Ready = ptr.To(true)
			g.Expect(k8s.Update(ctx, s)).To(Succeed())
		}, timeout, poll).Should(Succeed())
		Eventually(func(g Gomega) int32 { return getDeployment(ns, md.Name)(g).Status.ActiveReplicaCount }, timeout, poll).
			Should(BeEquivalentTo(2))

		By("scaling the target to 0 when deactivated, through the scale subresource")
		patchDeployment(ns, md.Name, `{"spec":{"active":false}}`)
		Eventually(replicasOf(ns, "vllm"), timeout, poll).Should(BeEquivalentTo(0))
		expectEvent(ns, md.Name, "Scaled", "Scaled Deployment vllm from 2 to 0 replica(s).")
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusDeactivating))
		// The pods stop: the EndpointSlice controller empties the slice.
		Eventually(func(g Gomega) {
			s := &discoveryv1.EndpointSlice{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(slice), s)).To(Succeed())
			s.Endpoints = nil
			g.Expect(k8s.Update(ctx, s)).To(Succeed())
		}, timeout, poll).Should(Succeed())
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusInactive))

		By("scaling the target back to minReplica when activated")
		patchDeployment(ns, md.Name, `{"spec":{"active":true}}`)
		Eventually(replicasOf(ns, "vllm"), timeout, poll).Should(BeEquivalentTo(2))
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusDeploying))
	})

	It("follows a service source's Service when it is created after the deployment, and a port renamed", func() {
		ns := newNamespace()
		md := &gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "early"},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: "late", Source: gatewayv1.DeploymentSource{
				Service: &gatewayv1.ServiceSource{Name: "late", Port: 8000}}},
		}
		Expect(k8s.Create(ctx, md)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).To(Equal(gatewayv1.StatusDeployFailed))
			c := meta.FindStatusCondition(got.Status.Conditions, gatewayv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Message).To(ContainSubstring("Service late does not exist."))
		}, timeout, poll).Should(Succeed())

		// No selector, so no EndpointSlice ever changes: only the Service itself can wake the reconciler.
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "web", Port: 8000}}},
		}
		Expect(k8s.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).To(Equal(gatewayv1.StatusDeploying))
			g.Expect(got.Status.PortName).To(Equal("web"))
		}, timeout, poll).Should(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
			svc.Spec.Ports[0].Name = "predict"
			g.Expect(k8s.Update(ctx, svc)).To(Succeed())
		}, timeout, poll).Should(Succeed())
		Eventually(func(g Gomega) string { return getDeployment(ns, md.Name)(g).Status.PortName }, timeout, poll).
			Should(Equal("predict"))
	})

	It("probes a url source's readiness path", func() {
		ns := newNamespace()
		srv, healthy := healthServer()
		md := urlDeployment(ns, "remote", "remote-model", srv.URL+"/")
		Expect(k8s.Create(ctx, md)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, md))).To(Succeed()) })

		Eventually(func(g Gomega) {
			got := getDeployment(ns, md.Name)(g)
			g.Expect(got.Status.Status).To(Equal(gatewayv1.StatusActive))
			g.Expect(got.Status.ActiveReplicaCount).To(BeEquivalentTo(1))
			g.Expect(got.Status.Service).To(BeEmpty())
			g.Expect(readyReason(got.Status.Conditions)).To(Equal("True/Active"))
		}, timeout, poll).Should(Succeed())

		By("UNHEALTHY once the server answers 500")
		healthy.Store(false)
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusUnhealthy))
		expectEvent(ns, md.Name, "NoReadyReplica", "ACTIVE → UNHEALTHY")

		By("ACTIVE again once it answers 200")
		healthy.Store(true)
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusActive))

		By("INACTIVE when deactivated: nothing to stop")
		patchDeployment(ns, md.Name, `{"spec":{"active":false}}`)
		Eventually(statusOf(ns, md.Name), timeout, poll).Should(Equal(gatewayv1.StatusInactive))
	})
})

var _ = Describe("Model reconciler", func() {
	envNames := func(m *gatewayv1.Model) []string {
		var out []string
		for _, e := range m.Status.Environments {
			out = append(out, e.Name+"="+e.Deployment+":"+string(e.Status))
		}
		return out
	}
	getModel := func(ns, name string) func(Gomega) *gatewayv1.Model {
		return func(g Gomega) *gatewayv1.Model {
			out := &gatewayv1.Model{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, out)).To(Succeed())
			return out
		}
	}

	It("reports each environment's deployment and status, and which environments each deployment serves", func() {
		ns := newNamespace()
		srv, _ := healthServer()
		v1, v2 := urlDeployment(ns, "v1", "m", srv.URL), urlDeployment(ns, "v2", "m", srv.URL)
		for _, md := range []*gatewayv1.ModelDeployment{v1, v2} {
			Expect(k8s.Create(ctx, md)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, md))).To(Succeed()) })
		}
		m := modelOf(ns, "m",
			gatewayv1.ModelEnvironment{Name: gatewayv1.EnvironmentProduction, Deployment: "v1"},
			gatewayv1.ModelEnvironment{Name: "staging", Deployment: "v3"})
		m.Spec.Development = "v1"
		Expect(k8s.Create(ctx, m)).To(Succeed())

		By("Ready False with DeploymentNotFound while staging points at a deployment that does not exist")
		Eventually(func(g Gomega) {
			got := getModel(ns, "m")(g)
			g.Expect(envNames(got)).To(Equal([]string{"production=v1:ACTIVE", "staging=v3:", "development=v1:ACTIVE"}))
			g.Expect(got.Status.DeploymentsCount).To(BeEquivalentTo(2))
			g.Expect(readyReason(got.Status.Conditions)).To(Equal("False/DeploymentNotFound"))
			c := meta.FindStatusCondition(got.Status.Conditions, gatewayv1.ConditionReady)
			g.Expect(c.Message).To(ContainSubstring("staging → v3"))
		}, timeout, poll).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(getDeployment(ns, "v1")(g).Status.Environments).To(Equal([]string{"development", "production"}))
			g.Expect(getDeployment(ns, "v2")(g).Status.Environments).To(BeEmpty())
		}, timeout, poll).Should(Succeed())

		By("following a promotion: one patch of the production pointer")
		Expect(k8s.Patch(ctx, &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}},
			client.RawPatch("application/merge-patch+json",
				[]byte(`{"spec":{"environments":[{"name":"production","deployment":"v2"},{"name":"staging","deployment":"v1"}]}}`)))).
			To(Succeed())
		Eventually(func(g Gomega) {
			got := getModel(ns, "m")(g)
			g.Expect(envNames(got)).To(Equal([]string{"production=v2:ACTIVE", "staging=v1:ACTIVE", "development=v1:ACTIVE"}))
			g.Expect(readyReason(got.Status.Conditions)).To(Equal("True/" + gatewayv1.ReasonReady))
		}, timeout, poll).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(getDeployment(ns, "v1")(g).Status.Environments).To(Equal([]string{"development", "staging"}))
			g.Expect(getDeployment(ns, "v2")(g).Status.Environments).To(Equal([]string{"production"}))
		}, timeout, poll).Should(Succeed())

		By("counting deployments as they come and go")
		Expect(k8s.Delete(ctx, v2)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getModel(ns, "m")(g)
			g.Expect(got.Status.DeploymentsCount).To(BeEquivalentTo(1))
			g.Expect(readyReason(got.Status.Conditions)).To(Equal("False/DeploymentNotFound"))
		}, timeout, poll).Should(Succeed())
	})
})

var _ = Describe("Models in the snapshot", func() {
	It("publishes the model's environments and how each deployment is reached", func() {
		ns := newNamespace()
		srv, _ := healthServer()
		remote := urlDeployment(ns, "remote", "m", srv.URL+"/")
		Expect(k8s.Create(ctx, remote)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, remote))).To(Succeed()) })
		pods := containerDeployment(ns, "pods", "m")
		pods.Spec.Active = ptr.To(false)
		Expect(k8s.Create(ctx, pods)).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "triton"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http-infer", Port: 8000}}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "triton"},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: "m",
				Source: gatewayv1.DeploymentSource{Service: &gatewayv1.ServiceSource{Name: "triton", Port: 8000}}},
		})).To(Succeed())
		m := modelOf(ns, "m", gatewayv1.ModelEnvironment{Name: gatewayv1.EnvironmentProduction, Deployment: "remote"})
		m.Spec.TeamID = "team-a"
		m.Spec.Development = "pods"
		Expect(k8s.Create(ctx, m)).To(Succeed())

		Eventually(func(g Gomega) {
			s, _, _, err := readSnapshot(ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Models).To(Equal([]snapshot.ServedModel{{ID: "m", TeamID: "team-a", Development: "pods",
				Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "remote"}}}}))
			g.Expect(s.Deployments).To(Equal([]snapshot.Deployment{
				{ID: "pods", ModelID: "m", Kind: snapshot.DeploymentService, Service: "md-pods", PortName: "http",
					PredictPath: "/predict", Active: false, Ready: false, Status: "INACTIVE", StartupTimeoutSeconds: 600},
				{ID: "remote", ModelID: "m", Kind: snapshot.DeploymentURL, URL: strings.TrimSuffix(srv.URL, "/"),
					PredictPath: "/predict", Active: true, Ready: true, Status: "ACTIVE", StartupTimeoutSeconds: 600},
				// A Service with no endpoints yet.
				{ID: "triton", ModelID: "m", Kind: snapshot.DeploymentService, Service: "triton", PortName: "http-infer",
					PredictPath: "/predict", Active: true, Ready: false, Status: "DEPLOYING", StartupTimeoutSeconds: 600},
			}))
		}, timeout, poll).Should(Succeed())
	})
})
