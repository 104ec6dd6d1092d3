package sandboxmanager

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/api/sandbox"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/sandboximage"
)

// The BuildKit backend is tested through its Job object only: envtest runs no Job controller and no kubelet, so
// the test writes the Job's outcome (and, for a success, the image BuildKit would have pushed) itself.
func TestBuildKitBackend(t *testing.T) {
	img := &gatewayv1.SandboxImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.SandboxImageObjectName("red", "with-run")},
		Spec: gatewayv1.SandboxImageSpec{TeamID: "red", Name: "with-run"}}
	create(t, img)
	repo, err := sandbox.Repository(registryOf(), "red", "with-run")
	if err != nil {
		t.Fatal(err)
	}
	stop := startManager(t, sandboximage.Options{BuildKitImage: "moby/buildkit:rootless", ContextFetcherImage: "gcr.io/go-containerregistry/crane:debug"})
	defer stop()
	dockerfile := map[string]string{"Dockerfile": "FROM python:3.12\nRUN pip install requests\n"}

	t.Run("a RUN is built by a Job, whose success is tagged", func(t *testing.T) {
		b := pushBuild(t, img, repo, "sib-bk-ok", dockerfile)
		job := waitJob(t, b.Name)
		if len(job.OwnerReferences) != 1 || job.OwnerReferences[0].UID != b.UID || !ptrTrue(job.OwnerReferences[0].Controller) {
			t.Errorf("the Job is not controlled by its build: %v", job.OwnerReferences)
		}
		pod := job.Spec.Template.Spec
		if len(pod.Containers) != 1 || pod.Containers[0].Image != "moby/buildkit:rootless" || len(pod.InitContainers) != 1 {
			t.Fatalf("pod: %+v", pod)
		}
		args := strings.Join(pod.Containers[0].Args, " ")
		wantOut := "--output type=image,name=" + repo.Tag(sandboximage.BuildKitTag(b.Name)).String() + ",push=true,registry.insecure=true"
		if !strings.Contains(args, wantOut) || !strings.Contains(args, "--frontend dockerfile.v0") {
			t.Errorf("buildctl args %q, want %q", args, wantOut)
		}
		if !slices.ContainsFunc(pod.InitContainers[0].Env, func(e corev1.EnvVar) bool {
			return e.Name == "CONTEXT_LAYER" && strings.HasPrefix(e.Value, repo.String()+"@sha256:")
		}) {
			t.Errorf("the context fetcher is not told the context layer: %v", pod.InitContainers[0].Env)
		}
		if got := get(t, b.Name, &gatewayv1.SandboxImageBuild{}); got.Status.Status != gatewayv1.SandboxBuilding {
			t.Errorf("while the Job runs the build is %s", got.Status.Status)
		}

		// What BuildKit would push, then what the Job controller would record.
		built, _ := random.Image(256, 1)
		if err := remote.Write(repo.Tag(sandboximage.BuildKitTag(b.Name)), built); err != nil {
			t.Fatal(err)
		}
		finishJob(t, job, true)
		done := waitBuild(t, b.Name)
		want, _ := built.Digest()
		if done.Status.Status != gatewayv1.SandboxBuilt || done.Status.Digest != want.String() || done.Status.Tag != "v1" {
			t.Fatalf("build: %+v", done.Status)
		}
		if _, err := remote.Image(repo.Tag("v1")); err != nil {
			t.Fatalf("v1 is not in the registry: %v", err)
		}
	})
	t.Run("a failed Job fails the build with its reason", func(t *testing.T) {
		b := pushBuild(t, img, repo, "sib-bk-fail", dockerfile)
		finishJob(t, waitJob(t, b.Name), false)
		done := waitBuild(t, b.Name)
		if done.Status.Status != gatewayv1.SandboxFailed || !strings.Contains(done.Status.Reason, "BuildKit Job sib-bk-fail failed") {
			t.Fatalf("build: %+v", done.Status)
		}
		if c := meta.FindStatusCondition(done.Status.Conditions, gatewayv1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse ||
			c.Reason != gatewayv1.ReasonSandboxFailed || c.Message != done.Status.Reason {
			t.Errorf("Ready condition of a FAILED build: %+v", c)
		}
	})
}

func ptrTrue(b *bool) bool { return b != nil && *b }

func waitJob(t *testing.T, name string) *batchv1.Job {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var job batchv1.Job
		err := env.Client.Get(context.Background(), keyOf(name), &job)
		if err == nil {
			if b := get(t, name, &gatewayv1.SandboxImageBuild{}); b.Status.JobName == name {
				return &job
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Job %s: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finishJob writes the status the Job controller would write once the pod succeeded or failed.
func finishJob(t *testing.T, job *batchv1.Job, ok bool) {
	t.Helper()
	now := metav1.NewTime(time.Now())
	start := metav1.NewTime(now.Add(-time.Minute))
	job.Status.StartTime = &start
	if ok {
		job.Status.Succeeded, job.Status.CompletionTime = 1, &now
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "CompletionsReached"},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "CompletionsReached"},
		}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
		}
	}
	if err := env.Client.Status().Update(context.Background(), job); err != nil {
		t.Fatalf("write the Job's outcome: %v", err)
	}
}
