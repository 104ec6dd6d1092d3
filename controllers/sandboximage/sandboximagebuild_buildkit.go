package sandboximage

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/imagebuild"
)

// The BuildKit backend: a Dockerfile the built-in builder refuses is built by a Job of two containers. The first
// (ContextFetcherImage) copies the context layer out of the workspace registry and unzips it into an emptyDir; the
// second runs rootless BuildKit (buildctl-daemonless.sh) on it and pushes the result to the tag
// buildkit-<build>. The reconciler then treats that digest like any other result: it assigns v<n> and latest.

// BuildKitTag is the tag a BuildKit Job pushes its result to.
func BuildKitTag(build string) string { return "buildkit-" + build }

// startJob creates the build's Job and records its name.
func (r *SandboxImageBuildReconciler) startJob(ctx context.Context, b *gatewayv1.SandboxImageBuild, reg *gatewayv1.ImageRegistry,
	repo name.Repository, push []remote.Option) error {
	layer, err := imagebuild.ContextLayer(ctx, repo.Digest(b.Status.ContextDigest), push)
	if err != nil {
		return err
	}
	job := buildKitJob(b, reg, repo, layer.String(), r.Opts)
	if err := controllerutil.SetControllerReference(b, job, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create the BuildKit Job: %w", err)
	}
	return r.setStatus(ctx, b, func(s *gatewayv1.SandboxImageBuildStatus) { s.JobName = job.Name })
}

// observeJob maps the Job's outcome onto the build: complete -> the pushed digest, failed -> FAILED, else wait.
func (r *SandboxImageBuildReconciler) observeJob(ctx context.Context, b *gatewayv1.SandboxImageBuild, repo name.Repository,
	push []remote.Option) (imagebuild.Result, bool, error) {
	var job batchv1.Job
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Status.JobName}, &job)
	if apierrors.IsNotFound(err) {
		return imagebuild.Result{}, false, &imagebuild.Refusal{Reason: fmt.Sprintf("The BuildKit Job %s was deleted before it finished.", b.Status.JobName)}
	}
	if err != nil {
		return imagebuild.Result{}, false, err
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobFailed:
			return imagebuild.Result{}, false, &imagebuild.Refusal{Reason: fmt.Sprintf("The BuildKit Job %s failed (%s): %s See its Pod's logs.", job.Name, c.Reason, c.Message)}
		case batchv1.JobComplete:
			res, found, err := imagebuild.Resolve(ctx, repo.Tag(BuildKitTag(b.Name)), push)
			if err != nil {
				return res, false, err
			}
			if !found {
				return res, false, &imagebuild.Refusal{Reason: fmt.Sprintf("The BuildKit Job %s completed but pushed no image to tag %s.", job.Name, BuildKitTag(b.Name))}
			}
			return res, false, nil
		}
	}
	return imagebuild.Result{}, true, nil
}

// buildKitJob is the Job that builds b with BuildKit.
func buildKitJob(b *gatewayv1.SandboxImageBuild, reg *gatewayv1.ImageRegistry, repo name.Repository, layer string, o Options) *batchv1.Job {
	insecure := strings.HasPrefix(reg.URL, "http://")
	fetch := `crane blob "$CONTEXT_LAYER" | gunzip > /work/context.zip && unzip -q /work/context.zip -d /work/src && rm /work/context.zip`
	if insecure {
		fetch = strings.Replace(fetch, "crane blob", "crane blob --insecure", 1)
	}
	output := "type=image,name=" + repo.Tag(BuildKitTag(b.Name)).String() + ",push=true"
	if insecure {
		output += ",registry.insecure=true"
	}
	env := []corev1.EnvVar{{Name: "DOCKER_CONFIG", Value: "/registry"}}
	mounts := []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
	volumes := []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if reg.SecretRef != nil {
		key := reg.SecretRef.Key
		if key == "" {
			key = gatewayv1.DockerConfigKey
		}
		mounts = append(mounts, corev1.VolumeMount{Name: "registry", MountPath: "/registry", ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "registry", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: reg.SecretRef.Name, Items: []corev1.KeyToPath{{Key: key, Path: "config.json"}}}}})
	}
	unconfined := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: b.Name,
			Labels: map[string]string{gatewayv1.LabelSandboxImage: b.Spec.ImageRef, "app.kubernetes.io/component": "sandbox-buildkit"}},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   ptr.To[int64](3600),
			TTLSecondsAfterFinished: ptr.To[int32](3600),
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					Volumes:                      volumes,
					InitContainers: []corev1.Container{{
						Name: "fetch-context", Image: o.ContextFetcherImage,
						Command:      []string{"sh", "-c", fetch},
						Env:          append(env, corev1.EnvVar{Name: "CONTEXT_LAYER", Value: repo.Digest(layer).String()}),
						VolumeMounts: mounts,
					}},
					Containers: []corev1.Container{{
						Name: "buildkit", Image: o.BuildKitImage,
						Command: []string{"buildctl-daemonless.sh"},
						Args: []string{"build", "--frontend", "dockerfile.v0", "--local", "context=/work/src",
							"--local", "dockerfile=/work/src", "--output", output},
						Env:          append(env, corev1.EnvVar{Name: "BUILDKITD_FLAGS", Value: "--oci-worker-no-process-sandbox"}),
						VolumeMounts: mounts,
						// Rootless BuildKit, as its documentation runs it in Kubernetes.
						SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000),
							SeccompProfile: unconfined, AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}},
					}},
				},
			},
		},
	}
}
