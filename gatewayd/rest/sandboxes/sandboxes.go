// Package sandboxes serves the sandbox image routes (docs/rest-api.md "Sandbox images"):
// POST /v1/sandboxes/images creates the SandboxImage of (team, name) if missing and one SandboxImageBuild per push
// before it answers; GET reads the latest build's status and the tags; DELETE removes the record. The upload URL
// (PUT /v1/sandboxes/uploads/{build}, upload.go) streams a ZIP into the workspace registry. gatewayd only accepts:
// imports and builds run in the manager.
package sandboxes

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/api/netguard"
	"github.com/modelgate/modelgate/api/sandbox"
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// Options configures the sandbox routes.
type Options struct {
	// BaseURL is {base_url}, the public address upload URLs begin with. Defaults to the scheme and Host of the
	// request that asked for one.
	BaseURL string
	// UploadKey signs upload URLs (HMAC-SHA256). Every replica must hold the same key, so any of them takes the
	// PUT. Required: without it the push routes answer 503.
	UploadKey []byte
	// UploadTTL is how long an upload URL is valid. Defaults to one hour.
	UploadTTL time.Duration
	// MaxUploadBytes caps an uploaded ZIP. Defaults to 5 GB (5,000,000,000 bytes).
	MaxUploadBytes int64
	// AllowInternalImages lets image references aim at loopback, private and link-local registries (a
	// development stack).
	AllowInternalImages bool
	// RegistryTransport reaches the workspace registry (operator-configured, so not guarded). Defaults to
	// http.DefaultTransport.
	RegistryTransport http.RoundTripper
}

// DefaultMaxUploadBytes is the 5 GB cap of an upload (docs/rest-api.md "Sandbox images").
const DefaultMaxUploadBytes = 5_000_000_000

type service struct {
	k    *kit.Kit
	opts Options
}

// Register adds the sandbox routes to mux.
func Register(mux ingress.Mux, k *kit.Kit, opts Options) {
	if opts.UploadTTL <= 0 {
		opts.UploadTTL = time.Hour
	}
	if opts.MaxUploadBytes <= 0 {
		opts.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if opts.RegistryTransport == nil {
		opts.RegistryTransport = http.DefaultTransport
	}
	s := &service{k: k, opts: opts}
	k.Handle(mux, "POST /v1/sandboxes/images", kit.AccessSandbox, s.push)
	k.Handle(mux, "GET /v1/sandboxes/images/{image_name}", kit.AccessSandbox, s.get)
	// The polling path without /v1 (docs/rest-api.md "Sandbox images").
	k.Handle(mux, "GET /sandboxes/images/{image_name}", kit.AccessSandbox, s.get)
	k.Handle(mux, "GET /v1/sandboxes/images/{image_name}/tags", kit.AccessSandbox, s.tags)
	k.Handle(mux, "DELETE /v1/sandboxes/images/{image_name}", kit.AccessSandbox, s.remove)
	// The upload is authenticated by its signature, not by an API key (docs/rest-api.md "Sandbox images").
	mux.HandleFunc("PUT /v1/sandboxes/uploads/{build}", s.upload)
}

type pushBody struct {
	Name         string  `json:"name"`
	Image        *string `json:"image"`
	DockerConfig *string `json:"docker_config"`
}

// pushJSON is the 202 of a push. It names the repository the push registers into; it carries no image_ref,
// because this push has no tag yet: the manager assigns it when the build is BUILT, and GET carries it then.
type pushJSON struct {
	Name       string  `json:"name"`
	Status     string  `json:"status"`
	UploadURL  *string `json:"upload_url,omitempty"`
	Repository string  `json:"repository"`
}

// selectTeam applies the team table to r: the teams are those of the snapshot the caller was authenticated with.
func (s *service) selectTeam(w http.ResponseWriter, r *http.Request, c auth.Caller) (string, bool) {
	teams := func() []string {
		ctx, cancel := context.WithTimeout(r.Context(), s.k.Opts.ReadYourWritesTimeout)
		defer cancel()
		var ids []string
		_ = s.k.Opts.Directory.WaitFor(ctx, c.Namespace, func(snap *snapshot.Snapshot) bool {
			ids = ids[:0]
			for _, t := range snap.Teams {
				ids = append(ids, t.ID)
			}
			return true
		})
		slices.Sort(ids)
		return ids
	}
	header, ok := kit.Header(w, r, "X-Team-Id")
	if !ok {
		return "", false
	}
	query, ok := kit.Query(w, r, "team_id")
	if !ok {
		return "", false
	}
	team, refusal := SelectTeam(header, query, teams,
		func(t string) authz.Decision { return c.Decide(authz.ActionSandbox, authz.Resource{TeamID: t}) })
	if refusal != nil {
		httperr.WriteError(w, refusal)
		return "", false
	}
	return team, true
}

// registry returns the workspace's image registry, answering 409 when the workspace has none.
func (s *service) registry(w http.ResponseWriter, r *http.Request, ns string) (*gatewayv1.ImageRegistry, bool) {
	reg, err := workspaceRegistry(r.Context(), s.k.Opts.Client, ns)
	if err != nil {
		kit.WriteKubeError(w, r, "get workspace", err)
		return nil, false
	}
	if reg == nil {
		httperr.Write(w, http.StatusConflict, httperr.CodeConflict,
			"This workspace has no image registry: an operator must set Workspace.spec.imageRegistry before images can be pushed.",
			[]httperr.FieldError{{Field: "Workspace.spec.imageRegistry", Message: "must be set"}})
		return nil, false
	}
	return reg, true
}

// workspaceRegistry is the imageRegistry of the oldest Workspace of ns that sets one, nil when none does.
func workspaceRegistry(ctx context.Context, c client.Reader, ns string) (*gatewayv1.ImageRegistry, error) {
	var list gatewayv1.WorkspaceList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b gatewayv1.Workspace) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	for _, ws := range list.Items {
		if ws.DeletionTimestamp == nil && ws.Spec.ImageRegistry != nil {
			return ws.Spec.ImageRegistry, nil
		}
	}
	return nil, nil
}

// push is POST /v1/sandboxes/images: it validates, creates the SandboxImage if missing, creates the build (and
// the Secret of its docker_config) and points the image at the build, all before it answers, so a GET right after
// shows this push's UPLOADING or BUILDING and never a previous push's terminal status.
func (s *service) push(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	team, ok := s.selectTeam(w, r, c)
	if !ok {
		return
	}
	var body pushBody
	if !kit.DecodeBody(w, r, &body, false) {
		return
	}
	if body.Image == nil && len(s.opts.UploadKey) == 0 {
		httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable,
			"Builds from an upload are not configured on this gatewayd: it has no upload signing key (--sandbox-upload-key-file). Imports (image) work.", nil)
		return
	}
	if err := sandbox.CheckName(body.Name); err != nil {
		kit.BadRequest(w, "name", "name "+err.Error()+".")
		return
	}
	var dockerConfig []byte
	if body.Image != nil {
		if err := s.checkImage(*body.Image); err != nil {
			kit.BadRequest(w, "image", "image "+err.Error()+".")
			return
		}
	}
	if body.DockerConfig != nil {
		if body.Image == nil {
			kit.BadRequest(w, "docker_config", "docker_config is used only with image: a build from an upload pulls nothing private.")
			return
		}
		if _, err := sandbox.ParseDockerConfig([]byte(*body.DockerConfig)); err != nil {
			kit.BadRequest(w, "docker_config", "docker_config "+err.Error()+".")
			return
		}
		dockerConfig = []byte(*body.DockerConfig)
	}
	reg, ok := s.registry(w, r, c.Namespace)
	if !ok {
		return
	}
	repo, err := sandbox.Repository(reg, team, body.Name)
	if err != nil {
		kit.BadRequest(w, "name", fmt.Sprintf("name does not make a valid repository in the workspace registry: %v.", err))
		return
	}

	ctx := r.Context()
	img, ok := s.ensureImage(w, r, c.Namespace, team, body.Name)
	if !ok {
		return
	}
	build := &gatewayv1.SandboxImageBuild{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: c.Namespace, Name: ids.New(ids.SandboxImageBuild),
			Labels: map[string]string{gatewayv1.LabelSandboxImage: img.Name, gatewayv1.LabelSandboxTeam: team},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: gatewayv1.GroupVersion.String(), Kind: "SandboxImage",
				Name: img.Name, UID: img.UID}},
		},
		Spec: gatewayv1.SandboxImageBuildSpec{ImageRef: img.Name, TeamID: team},
	}
	if body.Image != nil {
		build.Spec.Source.Import = &gatewayv1.SandboxImport{Image: *body.Image}
		if dockerConfig != nil {
			build.Spec.Source.Import.DockerConfigSecretRef = &gatewayv1.SecretKeySelector{
				Name: build.Name + "-docker-config", Key: gatewayv1.DockerConfigKey}
		}
	} else {
		build.Spec.Source.Upload = &gatewayv1.SandboxUpload{}
	}
	if err := s.k.Opts.Client.Create(ctx, build); err != nil {
		kit.WriteKubeError(w, r, "create sandbox image build", err)
		return
	}
	if dockerConfig != nil {
		// Owned by the build, so it goes with it; never logged, never in status.
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: build.Name + "-docker-config",
				Labels: map[string]string{gatewayv1.LabelSandboxImage: img.Name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: gatewayv1.GroupVersion.String(),
					Kind: "SandboxImageBuild", Name: build.Name, UID: build.UID}}},
			Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{gatewayv1.DockerConfigKey: dockerConfig},
		}
		if err := s.k.Opts.Client.Create(ctx, secret); err != nil {
			kit.WriteKubeError(w, r, "create docker config secret", err)
			return
		}
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gatewayv1.AnnotationLatestBuild, build.Name)
	if err := s.k.Opts.Client.Patch(ctx, img, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		kit.WriteKubeError(w, r, "point sandbox image at its build", err)
		return
	}
	out := pushJSON{Name: body.Name, Status: string(build.Phase()), Repository: repo.String()}
	if build.Spec.Source.Upload != nil {
		u := s.uploadURL(r, c.Namespace, build.Name)
		out.UploadURL = &u
	}
	httperr.WriteJSON(w, http.StatusAccepted, out)
}

// checkImage returns why ref may not be imported: it must parse, name its registry host, and not aim at an
// internal address unless allowed.
func (s *service) checkImage(ref string) error {
	if len(ref) > 1024 {
		return fmt.Errorf("must be at most 1024 characters")
	}
	parsed, err := sandbox.ParseReference(ref)
	if err != nil {
		return err
	}
	first, _, hasPath := strings.Cut(ref, "/")
	if !hasPath || (!strings.ContainsAny(first, ".:[") && first != "localhost") {
		return fmt.Errorf("must include the registry hostname (for example docker.io/library/python:3.12)")
	}
	if err := netguard.CheckHost(parsed.Context().RegistryStr(), s.opts.AllowInternalImages); err != nil {
		return err
	}
	return nil
}

// ensureImage returns the SandboxImage of (team, imageName), creating it when missing.
func (s *service) ensureImage(w http.ResponseWriter, r *http.Request, ns, team, imageName string) (*gatewayv1.SandboxImage, bool) {
	img := &gatewayv1.SandboxImage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.SandboxImageObjectName(team, imageName),
			Labels: map[string]string{gatewayv1.LabelSandboxTeam: team}},
		Spec: gatewayv1.SandboxImageSpec{TeamID: team, Name: imageName},
	}
	err := s.k.Opts.Client.Create(r.Context(), img)
	if apierrors.IsAlreadyExists(err) {
		err = s.k.Opts.Client.Get(r.Context(), client.ObjectKeyFromObject(img), img)
		if err == nil && img.DeletionTimestamp != nil {
			httperr.Write(w, http.StatusConflict, httperr.CodeConflict,
				fmt.Sprintf("Sandbox image %q is being deleted; push again once it is gone.", imageName),
				[]httperr.FieldError{{Field: "name", Message: "names an image being deleted"}})
			return nil, false
		}
	}
	if err != nil {
		kit.WriteKubeError(w, r, "create sandbox image", err)
		return nil, false
	}
	return img, true
}

// loadImage reads the SandboxImage of the path's image_name for the selected team, answering 400 or 404.
func (s *service) loadImage(w http.ResponseWriter, r *http.Request, c auth.Caller) (*gatewayv1.SandboxImage, bool) {
	team, ok := s.selectTeam(w, r, c)
	if !ok {
		return nil, false
	}
	imageName := r.PathValue("image_name")
	if err := sandbox.CheckName(imageName); err != nil {
		kit.BadRequest(w, "image_name", "image_name "+err.Error()+" (a '/' in it is sent as %2F).")
		return nil, false
	}
	var img gatewayv1.SandboxImage
	key := client.ObjectKey{Namespace: c.Namespace, Name: gatewayv1.SandboxImageObjectName(team, imageName)}
	err := s.k.Opts.Client.Get(r.Context(), key, &img)
	if apierrors.IsNotFound(err) || (err == nil && img.DeletionTimestamp != nil) {
		kit.NotFound(w, "Sandbox image", imageName)
		return nil, false
	}
	if err != nil {
		kit.WriteKubeError(w, r, "get sandbox image", err)
		return nil, false
	}
	return &img, true
}

type imageJSON struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	// Repository is the image's repository in the workspace registry, absent while the workspace has none.
	Repository string `json:"repository,omitempty"`
	// ImageRef is the registered reference with its tag, repository:vN of the newest version (what latest
	// points at), once a push of the image is BUILT; absent before.
	ImageRef  string   `json:"image_ref,omitempty"`
	Tags      []string `json:"tags"`
	CreatedAt string   `json:"created_at"`
	UpdatedAt string   `json:"updated_at"`
	// Error says why the latest push FAILED (its build's reason); absent otherwise.
	Error string `json:"error,omitempty"`
}

// get is GET /v1/sandboxes/images/{image_name}: the status of the latest push (read from that build, which the
// POST named before it answered), and the tags assigned so far, latest included once there is one.
func (s *service) get(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	img, ok := s.loadImage(w, r, c)
	if !ok {
		return
	}
	out := imageJSON{Name: img.Spec.Name, Status: string(img.Status.Status), Tags: []string{},
		CreatedAt: img.CreationTimestamp.UTC().Format(time.RFC3339)}
	updated := img.CreationTimestamp.Time
	if latest := img.Annotations[gatewayv1.AnnotationLatestBuild]; latest != "" {
		var b gatewayv1.SandboxImageBuild
		err := s.k.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: latest}, &b)
		switch {
		case err == nil:
			out.Status = string(b.Phase())
			if b.Phase() == gatewayv1.SandboxFailed {
				out.Error = b.Status.Reason
			}
			updated = laterOf(updated, b.CreationTimestamp.Time)
		case !apierrors.IsNotFound(err):
			kit.WriteKubeError(w, r, "get sandbox image build", err)
			return
		}
	}
	for _, t := range img.Status.Tags {
		out.Tags = append(out.Tags, t.Name)
		updated = laterOf(updated, t.CreatedAt.Time)
	}
	if len(out.Tags) > 0 {
		out.Tags = append(out.Tags, "latest")
	}
	reg, err := workspaceRegistry(r.Context(), s.k.Opts.Client, c.Namespace)
	if err != nil {
		kit.WriteKubeError(w, r, "get workspace", err)
		return
	}
	if repo, err := sandbox.Repository(reg, img.Spec.TeamID, img.Spec.Name); err == nil {
		out.Repository = repo.String()
		if tag := newestTag(img.Status.Tags); tag != "" {
			out.ImageRef = repo.Tag(tag).String()
		}
	}
	out.UpdatedAt = updated.UTC().Format(time.RFC3339)
	httperr.WriteJSON(w, http.StatusOK, out)
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

type tagJSON struct {
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
	SizeBytes int64  `json:"size_bytes"`
}

// tags is GET /v1/sandboxes/images/{image_name}/tags, oldest first, paginated by version.
func (s *service) tags(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	page, ok := kit.ParsePage(w, r)
	if !ok {
		return
	}
	img, ok := s.loadImage(w, r, c)
	if !ok {
		return
	}
	tags := slices.Clone(img.Status.Tags)
	// The page keys sort like the versions: v2 before v10.
	keys := make([]string, len(tags))
	for i, t := range tags {
		keys[i] = versionKey(t.Name)
	}
	idx := make([]int, len(tags))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	sortedKeys := make([]string, len(idx))
	sorted := make([]gatewayv1.SandboxImageTag, len(idx))
	for i, j := range idx {
		sortedKeys[i], sorted[i] = keys[j], tags[j]
	}
	sel, more := page.Slice(sortedKeys)
	items := make([]tagJSON, 0, len(sel))
	for _, i := range sel {
		t := sorted[i]
		items = append(items, tagJSON{Name: t.Name, CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339), SizeBytes: t.SizeBytes})
	}
	httperr.WriteJSON(w, http.StatusOK, kit.NewPage(items, more, sortedKeys, sel))
}

// versionKey is a key of tag name that sorts like the versions: v2 before v10.
func versionKey(tag string) string {
	var v int64
	if _, err := fmt.Sscanf(tag, "v%d", &v); err != nil {
		v = 0
	}
	return fmt.Sprintf("%020d/%s", v, tag)
}

// newestTag is the tag of the highest version among tags ("" when there is none): the one latest points at.
func newestTag(tags []gatewayv1.SandboxImageTag) string {
	newest := ""
	for _, t := range tags {
		if newest == "" || versionKey(t.Name) > versionKey(newest) {
			newest = t.Name
		}
	}
	return newest
}

// remove is DELETE /v1/sandboxes/images/{image_name}: the record goes (and its builds, which it owns); the blobs
// stay in the registry.
func (s *service) remove(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	img, ok := s.loadImage(w, r, c)
	if !ok {
		return
	}
	err := s.k.Opts.Client.Delete(r.Context(), img, client.Preconditions{UID: &img.UID},
		client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) {
		kit.NotFound(w, "Sandbox image", img.Spec.Name)
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "delete sandbox image", err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"name": img.Spec.Name, "deleted": true})
}
