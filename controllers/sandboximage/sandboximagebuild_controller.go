package sandboximage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/modelgate/modelgate/api/netguard"
	"github.com/modelgate/modelgate/api/sandbox"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/imagebuild"
	"github.com/modelgate/modelgate/controllers/kit"
)

// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=sandboximages;sandboximagebuilds,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=sandboximages/status;sandboximagebuilds/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete

// Options configures the SandboxImageBuild reconciler.
type Options struct {
	// AllowInternalImages lets imported images and FROM images come from loopback, private and link-local
	// registries (a development stack).
	AllowInternalImages bool
	// BuildKitImage, when set, enables the BuildKit backend: a Dockerfile the built-in builder refuses (RUN,
	// several stages) is built by a Job running this rootless BuildKit image (for example moby/buildkit:rootless).
	BuildKitImage string
	// ContextFetcherImage fetches and unpacks the context for the BuildKit Job (an image with crane, gunzip and
	// unzip: gcr.io/go-containerregistry/crane:debug).
	ContextFetcherImage string
	// TempDir holds a context and its layers while a build runs; os.TempDir() when empty.
	TempDir string
	// RegistryTransport reaches the workspace registry (operator-configured, not guarded); http.DefaultTransport
	// when nil.
	RegistryTransport http.RoundTripper
	// UploadTTL is how long a build waits for its upload; one hour (the upload URL's life) when zero.
	UploadTTL time.Duration
}

// SandboxImageBuildReconciler runs imports and builds, and assigns the tag of each that succeeds. A build
// interrupted by a restart is still BUILDING and is simply run again: the tag is taken only at the end, from a
// counter on the SandboxImage's status written with optimistic concurrency, and a build that finds its own tag
// recorded there reuses it, so a run that died between the two status writes never takes a second tag.
type SandboxImageBuildReconciler struct {
	Client client.Client
	// Reader reads Secrets and the SandboxImage straight from the API server, never from a stale cache.
	Reader client.Reader
	Opts   Options
	Clock  clock.PassiveClock
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *SandboxImageBuildReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Opts.RegistryTransport == nil {
		r.Opts.RegistryTransport = http.DefaultTransport
	}
	if r.Opts.UploadTTL <= 0 {
		r.Opts.UploadTTL = time.Hour
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&gatewayv1.SandboxImageBuild{}).WithOptions(opts)
	if r.Opts.BuildKitImage != "" {
		b = b.Owns(&batchv1.Job{})
	}
	return b.Complete(kit.RequeueOnConflict{Reconciler: r})
}

// uploadGrace lets an upload that started just before its URL expired finish.
const uploadGrace = 10 * time.Minute

// Reconcile moves one build on to BUILT or FAILED. It writes the build's status itself, each write read again
// past the cache (setStatus).
func (r *SandboxImageBuildReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.SandboxImageBuild]{}.Run(ctx, r.Client, req, r.build)
}

// build runs one build that has not ended.
func (r *SandboxImageBuildReconciler) build(ctx context.Context, b *gatewayv1.SandboxImageBuild) (ctrl.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	if b.Status.Status.Terminal() {
		return ctrl.Result{}, nil
	}
	// The cache may not have this build's last status write yet (the event of its BUILDING write can queue a
	// reconcile that runs after it is BUILT): read it from the API server before running a build again.
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.Status.Status.Terminal() || b.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	img := &gatewayv1.SandboxImage{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ImageRef}, img); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.fail(ctx, b, nil, fmt.Sprintf("The sandbox image record %s (spec.imageRef) no longer exists.", b.Spec.ImageRef))
		}
		return ctrl.Result{}, err
	}
	if b.Phase() == gatewayv1.SandboxUploading {
		deadline := b.CreationTimestamp.Add(r.Opts.UploadTTL + uploadGrace)
		if left := deadline.Sub(r.Clock.Now()); left > 0 {
			return ctrl.Result{RequeueAfter: left}, nil
		}
		return ctrl.Result{}, r.fail(ctx, b, img, "No build context was uploaded before the upload URL expired; push again for a new one.")
	}
	reg, err := workspaceImageRegistry(ctx, r.Reader, b.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if reg == nil {
		return ctrl.Result{}, r.fail(ctx, b, img, "The workspace has no image registry: Workspace.spec.imageRegistry must be set.")
	}
	repo, err := sandbox.Repository(reg, img.Spec.TeamID, img.Spec.Name)
	if err != nil {
		return ctrl.Result{}, r.fail(ctx, b, img, fmt.Sprintf("The repository name is not valid in the workspace registry: %v.", err))
	}
	push, err := r.pushOptions(ctx, b.Namespace, reg)
	if err != nil {
		return ctrl.Result{}, err
	}
	if b.Status.Status != gatewayv1.SandboxBuilding {
		if err := r.setStatus(ctx, b, func(s *gatewayv1.SandboxImageBuildStatus) { s.Status = gatewayv1.SandboxBuilding }); err != nil {
			return ctrl.Result{}, err
		}
	}

	var res imagebuild.Result
	if b.Spec.Source.Import != nil {
		res, err = r.runImport(ctx, b, repo, push)
	} else {
		var wait bool
		res, wait, err = r.runBuild(ctx, b, reg, repo, push)
		if wait && err == nil {
			return ctrl.Result{}, nil // the Job's next change brings the build back
		}
	}
	var refusal *imagebuild.Refusal
	switch {
	case ctx.Err() != nil:
		// The manager is stopping: the build stays BUILDING and runs again in the next leader.
		return ctrl.Result{}, ctx.Err()
	case errors.As(err, &refusal):
		return ctrl.Result{}, r.fail(ctx, b, img, refusal.Reason)
	case errors.Is(err, errRetry):
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	case err != nil:
		log.Error(err, "Sandbox image build failed", "build", b.Name)
		return ctrl.Result{}, r.fail(ctx, b, img, fmt.Sprintf("The image could not be written to the workspace registry: %v.", err))
	}

	tag, err := r.assignTag(ctx, b, repo, res, push)
	if err != nil {
		// Retried with backoff, but not forever: a build is never left BUILDING.
		if ctx.Err() == nil && r.Clock.Since(b.CreationTimestamp.Time) > tagDeadline {
			return ctrl.Result{}, r.fail(ctx, b, img, fmt.Sprintf("No tag could be assigned within %s: %v.", tagDeadline, err))
		}
		return ctrl.Result{}, err
	}
	if err := r.setStatus(ctx, b, func(s *gatewayv1.SandboxImageBuildStatus) {
		s.Status, s.Tag, s.Digest, s.Reason = gatewayv1.SandboxBuilt, tag, res.Digest.String(), ""
	}); err != nil {
		return ctrl.Result{}, err
	}
	log.Info("Sandbox image built", "build", b.Name, "image", img.Spec.Name, "tag", tag, "digest", res.Digest.String())
	return ctrl.Result{}, nil
}

// tagDeadline bounds how long a built image waits for its tag (the workspace registry or the API server refusing).
const tagDeadline = 2 * time.Hour

// errRetry is a build that waits for something another writer is about to create (its docker config Secret).
var errRetry = errors.New("retry shortly")

// secretGrace is how long a build waits for the docker config Secret the push route creates right after it.
const secretGrace = time.Minute

func (r *SandboxImageBuildReconciler) runImport(ctx context.Context, b *gatewayv1.SandboxImageBuild, repo name.Repository, push []remote.Option) (imagebuild.Result, error) {
	src, err := sandbox.ParseReference(b.Spec.Source.Import.Image)
	if err != nil {
		return imagebuild.Result{}, &imagebuild.Refusal{Reason: fmt.Sprintf("spec.source.import.image %v.", err)}
	}
	if err := netguard.CheckHost(src.Context().RegistryStr(), r.Opts.AllowInternalImages); err != nil {
		return imagebuild.Result{}, &imagebuild.Refusal{Reason: fmt.Sprintf("spec.source.import.image %v.", err)}
	}
	others, err := r.workspaces(ctx)
	if err != nil {
		return imagebuild.Result{}, err
	}
	if err := sandbox.CheckOwnPath(src, b.Namespace, others); err != nil {
		return imagebuild.Result{}, &imagebuild.Refusal{Reason: fmt.Sprintf("spec.source.import.image %s %v.", src, err)}
	}
	kc := authn.Keychain(authn.NewMultiKeychain())
	if ref := b.Spec.Source.Import.DockerConfigSecretRef; ref != nil {
		var sec corev1.Secret
		err := r.Reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: ref.Name}, &sec)
		switch {
		case apierrors.IsNotFound(err) && r.Clock.Since(b.CreationTimestamp.Time) < secretGrace:
			return imagebuild.Result{}, errRetry
		case apierrors.IsNotFound(err):
			return imagebuild.Result{}, &imagebuild.Refusal{Reason: fmt.Sprintf("The docker config Secret %s (spec.source.import.dockerConfigSecretRef) does not exist.", ref.Name)}
		case err != nil:
			return imagebuild.Result{}, err
		}
		key := ref.Key
		if key == "" {
			key = gatewayv1.DockerConfigKey
		}
		if kc, err = sandbox.ParseDockerConfig(sec.Data[key]); err != nil {
			return imagebuild.Result{}, &imagebuild.Refusal{Reason: fmt.Sprintf("The docker config Secret %s entry %s %v.", ref.Name, key, err)}
		}
	}
	pull := []remote.Option{remote.WithAuthFromKeychain(kc), remote.WithTransport(netguard.Transport(r.Opts.AllowInternalImages))}
	return imagebuild.Import(ctx, src, repo, pull, push)
}

// runBuild builds from the uploaded context with the built-in builder, or hands it to the BuildKit Job. wait is
// true while the Job runs.
func (r *SandboxImageBuildReconciler) runBuild(ctx context.Context, b *gatewayv1.SandboxImageBuild, reg *gatewayv1.ImageRegistry,
	repo name.Repository, push []remote.Option) (res imagebuild.Result, wait bool, err error) {
	if b.Status.JobName != "" {
		return r.observeJob(ctx, b, repo, push)
	}
	zr, f, err := imagebuild.FetchContext(ctx, repo.Digest(b.Status.ContextDigest), push, r.Opts.TempDir)
	if err != nil {
		return res, false, err
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	layerDir, err := os.MkdirTemp(r.Opts.TempDir, "layers-")
	if err != nil {
		return res, false, err
	}
	defer os.RemoveAll(layerDir)
	others, err := r.workspaces(ctx)
	if err != nil {
		return res, false, err
	}
	pull := []remote.Option{remote.WithTransport(netguard.Transport(r.Opts.AllowInternalImages))}
	image, err := imagebuild.Build(ctx, zr, imagebuild.Options{Pull: pull, TempDir: layerDir,
		CheckBase: func(ref name.Reference) error {
			if err := netguard.CheckHost(ref.Context().RegistryStr(), r.Opts.AllowInternalImages); err != nil {
				return err
			}
			return sandbox.CheckOwnPath(ref, b.Namespace, others)
		}})
	if errors.Is(err, imagebuild.ErrNeedsBuildKit) && r.Opts.BuildKitImage != "" {
		return res, true, r.startJob(ctx, b, reg, repo, push)
	}
	if err != nil {
		return res, false, err
	}
	res, err = imagebuild.Push(ctx, image, repo, push)
	return res, false, err
}

// pushOptions reach the workspace registry with its credentials.
func (r *SandboxImageBuildReconciler) pushOptions(ctx context.Context, ns string, reg *gatewayv1.ImageRegistry) ([]remote.Option, error) {
	kc := authn.Keychain(authn.NewMultiKeychain())
	if reg.SecretRef != nil {
		var sec corev1.Secret
		if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: reg.SecretRef.Name}, &sec); err != nil {
			return nil, fmt.Errorf("failed to read the workspace registry Secret %s: %w", reg.SecretRef.Name, err)
		}
		key := reg.SecretRef.Key
		if key == "" {
			key = gatewayv1.DockerConfigKey
		}
		var err error
		if kc, err = sandbox.ParseDockerConfig(sec.Data[key]); err != nil {
			return nil, fmt.Errorf("the workspace registry Secret %s entry %s %w", reg.SecretRef.Name, key, err)
		}
	}
	return []remote.Option{remote.WithAuthFromKeychain(kc), remote.WithTransport(r.Opts.RegistryTransport)}, nil
}

// assignTag gives the pushed result its tag: the one already recorded for this build if a previous run got that
// far, else v<lastVersion+1>. The tag and latest are written to the registry before the SandboxImage's status
// records them, and that status write carries the resourceVersion read, so two writers never record one version.
func (r *SandboxImageBuildReconciler) assignTag(ctx context.Context, b *gatewayv1.SandboxImageBuild, repo name.Repository,
	res imagebuild.Result, push []remote.Option) (string, error) {
	var tag string
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		img := &gatewayv1.SandboxImage{}
		if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ImageRef}, img); err != nil {
			return err
		}
		if i := slices.IndexFunc(img.Status.Tags, func(t gatewayv1.SandboxImageTag) bool { return t.Build == b.Name }); i >= 0 {
			tag = img.Status.Tags[i].Name
			// Recorded by an earlier run: make sure the registry has it (re-pointing the same digest is a no-op).
			return imagebuild.Tag(ctx, repo.Tag(tag), res.Digest, push)
		}
		n := img.Status.LastVersion + 1
		tag = fmt.Sprintf("v%d", n)
		if err := imagebuild.Tag(ctx, repo.Tag(tag), res.Digest, push); err != nil {
			return err
		}
		if err := imagebuild.Tag(ctx, repo.Tag("latest"), res.Digest, push); err != nil {
			return err
		}
		img.Status.LastVersion = n
		img.Status.Tags = append(img.Status.Tags, gatewayv1.SandboxImageTag{Name: tag, Digest: res.Digest.String(),
			Build: b.Name, CreatedAt: metav1.NewTime(r.Clock.Now()), SizeBytes: res.Size})
		if img.Annotations[gatewayv1.AnnotationLatestBuild] == b.Name {
			img.Status.Status = gatewayv1.SandboxBuilt
		}
		return r.Client.Status().Update(ctx, img)
	})
	if err != nil {
		return "", fmt.Errorf("failed to assign the tag of build %s: %w", b.Name, err)
	}
	return tag, nil
}

// fail records a terminal FAILED with reason on the build, and on the image when the build is its latest push.
func (r *SandboxImageBuildReconciler) fail(ctx context.Context, b *gatewayv1.SandboxImageBuild, img *gatewayv1.SandboxImage, reason string) error {
	logr.FromContextOrDiscard(ctx).Info("Sandbox image build failed", "build", b.Name, "reason", reason)
	if err := r.setStatus(ctx, b, func(s *gatewayv1.SandboxImageBuildStatus) {
		s.Status, s.Reason = gatewayv1.SandboxFailed, reason
	}); err != nil {
		return err
	}
	if img == nil || img.Annotations[gatewayv1.AnnotationLatestBuild] != b.Name {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(img), img); err != nil {
			return client.IgnoreNotFound(err)
		}
		img.Status.Status = gatewayv1.SandboxFailed
		return r.Client.Status().Update(ctx, img)
	})
}

func (r *SandboxImageBuildReconciler) setStatus(ctx context.Context, b *gatewayv1.SandboxImageBuild, change func(*gatewayv1.SandboxImageBuildStatus)) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		before := b.Status.DeepCopy()
		change(&b.Status)
		b.Status.ObservedGeneration = b.Generation
		meta.SetStatusCondition(&b.Status.Conditions, readyCondition(b))
		if equality.Semantic.DeepEqual(before, &b.Status) {
			return nil
		}
		return r.Client.Status().Update(ctx, b)
	})
}

// readyCondition derives the build's Ready condition from its status.
func readyCondition(b *gatewayv1.SandboxImageBuild) metav1.Condition {
	c := metav1.Condition{Type: gatewayv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: b.Generation}
	switch b.Phase() {
	case gatewayv1.SandboxBuilt:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, gatewayv1.ReasonSandboxBuilt, fmt.Sprintf("The image is tagged %s.", b.Status.Tag)
	case gatewayv1.SandboxFailed:
		c.Reason, c.Message = gatewayv1.ReasonSandboxFailed, b.Status.Reason
	case gatewayv1.SandboxUploading:
		c.Reason, c.Message = gatewayv1.ReasonSandboxUploading, "The build waits for its context at the upload URL."
	default:
		c.Reason, c.Message = gatewayv1.ReasonSandboxBuilding, "The image is being imported or built."
	}
	return c
}

// workspaces lists the Workspaces of every namespace, whose registry paths an import or a FROM of another
// namespace may not read (sandbox.CheckOwnPath).
func (r *SandboxImageBuildReconciler) workspaces(ctx context.Context) ([]gatewayv1.Workspace, error) {
	var list gatewayv1.WorkspaceList
	if err := r.Reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("failed to list Workspaces: %w", err)
	}
	return list.Items, nil
}

// workspaceImageRegistry is the imageRegistry of the oldest Workspace of ns that sets one; nil when none does.
func workspaceImageRegistry(ctx context.Context, c client.Reader, ns string) (*gatewayv1.ImageRegistry, error) {
	var list gatewayv1.WorkspaceList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b gatewayv1.Workspace) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	for _, ws := range list.Items {
		if ws.DeletionTimestamp == nil && ws.Spec.ImageRegistry != nil {
			return ws.Spec.ImageRegistry, nil
		}
	}
	return nil, nil
}
