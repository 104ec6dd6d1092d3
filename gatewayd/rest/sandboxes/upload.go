package sandboxes

import (
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/stream"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/sandbox"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// The upload URL is {base_url}/v1/sandboxes/uploads/{namespace}.{build}?expires=<unix seconds>&sig=<hex>, where sig
// is HMAC-SHA256(UploadKey, "PUT\n<namespace>\n<build>\n<expires>"). A namespace is a DNS label and a build name
// has no dot, so the path segment splits at its first dot.

// sign is the signature of an upload of build in ns that expires at exp.
func sign(key []byte, ns, build string, exp int64) []byte {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "PUT\n%s\n%s\n%d", ns, build, exp)
	return m.Sum(nil)
}

// uploadURL is the signed URL of build's upload, valid for UploadTTL.
func (s *service) uploadURL(r *http.Request, ns, build string) string {
	base := strings.TrimSuffix(s.opts.BaseURL, "/")
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	exp := s.k.Opts.Clock().Add(s.opts.UploadTTL).Unix()
	q := url.Values{"expires": {strconv.FormatInt(exp, 10)}, "sig": {hex.EncodeToString(sign(s.opts.UploadKey, ns, build, exp))}}
	return base + "/v1/sandboxes/uploads/" + ns + "." + build + "?" + q.Encode()
}

// verify answers 403 naming the field when the URL's signature is wrong or it has expired. The signature is
// checked first, in constant time, so an expired URL is only reported as such to whoever holds a real one.
func (s *service) verify(w http.ResponseWriter, r *http.Request) (ns, build string, expires int64, ok bool) {
	ns, build, _ = strings.Cut(r.PathValue("build"), ".")
	q := r.URL.Query()
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	sig, serr := hex.DecodeString(q.Get("sig"))
	if len(s.opts.UploadKey) == 0 || err != nil || serr != nil || !hmac.Equal(sig, sign(s.opts.UploadKey, ns, build, exp)) {
		httperr.Write(w, http.StatusForbidden, httperr.CodeForbidden,
			"The upload URL's signature is not valid: use the upload_url of the push response unchanged.",
			[]httperr.FieldError{{Field: "sig", Message: "must be the signature the service issued"}})
		return "", "", 0, false
	}
	if s.k.Opts.Clock().Unix() > exp {
		httperr.Write(w, http.StatusForbidden, httperr.CodeForbidden,
			"The upload URL has expired: upload URLs are valid for one hour; push again for a new one.",
			[]httperr.FieldError{{Field: "expires", Message: "has passed"}})
		return "", "", 0, false
	}
	return ns, build, exp, true
}

// errTooLarge is a body that passed the cap.
var errTooLarge = errors.New("upload exceeds the size limit")

// cappedReader fails once more than left bytes were read, so a body without Content-Length is cut off too. It
// keeps the body's own read failure (past its deadline, a cut connection) apart from the registry's.
type cappedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
	failed   error
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.failed = err
	}
	c.left -= int64(n)
	if c.left < 0 {
		c.exceeded = true
		return n, errTooLarge
	}
	return n, err
}

func (s *service) tooLarge(w http.ResponseWriter) {
	httperr.Write(w, http.StatusRequestEntityTooLarge, httperr.CodePayloadTooLarge,
		fmt.Sprintf("The upload is larger than %d bytes (5 GB), the most a build context may be.", s.opts.MaxUploadBytes),
		[]httperr.FieldError{{Field: "body", Message: fmt.Sprintf("must be at most %d bytes", s.opts.MaxUploadBytes)}})
}

// upload is PUT /v1/sandboxes/uploads/{build}: it streams the ZIP into the workspace registry as a single-layer
// artifact, computing the digest while it streams (constant memory, nothing on disk), records the artifact's
// digest on the build, which moves it to BUILDING for the manager (claim: one upload of a build wins, the others
// are 409), and then tags the artifact sandbox.ContextTag(build).
func (s *service) upload(w http.ResponseWriter, r *http.Request) {
	ns, buildName, expires, ok := s.verify(w, r)
	if !ok {
		return
	}
	if r.ContentLength > s.opts.MaxUploadBytes {
		s.tooLarge(w)
		return
	}
	// Proven by its signature, the upload may take until its URL expires (by the API's clock), past gatewayd's
	// body read deadline.
	ingress.Extend(w, time.Now().Add(time.Unix(expires, 0).Sub(s.k.Opts.Clock())))
	ctx := r.Context()
	log := logr.FromContextOrDiscard(ctx).WithValues("namespace", ns, "build", buildName)
	c := s.k.Opts.Client
	var build gatewayv1.SandboxImageBuild
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: buildName}, &build); err != nil {
		if apierrors.IsNotFound(err) {
			kit.NotFound(w, "Sandbox image build", buildName)
			return
		}
		kit.WriteKubeError(w, r, "get sandbox image build", err)
		return
	}
	if build.Spec.Source.Upload == nil || build.Phase() != gatewayv1.SandboxUploading {
		s.uploaded(w, &build)
		return
	}
	var img gatewayv1.SandboxImage
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: build.Spec.ImageRef}, &img); err != nil {
		kit.WriteKubeError(w, r, "get sandbox image", err)
		return
	}
	reg, ok := s.registry(w, r, ns)
	if !ok {
		return
	}
	repo, err := sandbox.Repository(reg, img.Spec.TeamID, img.Spec.Name)
	if err != nil {
		kit.WriteKubeError(w, r, "resolve the workspace registry", err)
		return
	}
	kc, err := registryKeychain(r, c, ns, reg)
	if err != nil {
		log.Error(err, "Failed to read the workspace registry credentials")
		httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable,
			"The workspace registry's credentials (Workspace.spec.imageRegistry.secretRef) could not be read.", nil)
		return
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(s.opts.RegistryTransport)}

	body := &cappedReader{r: r.Body, left: s.opts.MaxUploadBytes}
	// A ZIP is compressed already: the fastest gzip level only frames it, at little CPU.
	layer := stream.NewLayer(io.NopCloser(body), stream.WithCompressionLevel(gzip.BestSpeed))
	if err := remote.WriteLayer(repo, layer, ropts...); err != nil {
		if body.exceeded {
			s.tooLarge(w)
			return
		}
		if body.failed != nil {
			httperr.WriteError(w, ingress.ReadFailed(body.failed))
			return
		}
		log.Error(err, "Failed to stream the build context into the workspace registry")
		httperr.Write(w, http.StatusBadGateway, httperr.CodeUnavailable,
			"The build context could not be written to the workspace registry; retry the upload.", nil)
		return
	}
	// The manifest goes in by its digest, untagged: only the upload that records itself on the build tags it, so
	// the registry's tag and the build's digest name the same context.
	artifact, err := mutate.AppendLayers(empty.Image, layer)
	var dig v1.Hash
	if err == nil {
		artifact = mutate.ConfigMediaType(mutate.MediaType(artifact, types.OCIManifestSchema1), sandbox.ContextMediaType)
		if dig, err = artifact.Digest(); err == nil {
			err = remote.Write(repo.Digest(dig.String()), artifact, ropts...)
		}
	}
	if err != nil {
		log.Error(err, "Failed to write the build context manifest")
		httperr.Write(w, http.StatusBadGateway, httperr.CodeUnavailable,
			"The build context could not be written to the workspace registry; retry the upload.", nil)
		return
	}
	if !s.claim(w, r, &build, dig) {
		return
	}
	if err := remote.Tag(repo.Tag(sandbox.ContextTag(buildName)), artifact, ropts...); err != nil {
		// The build is recorded and the manager reads the context by its digest; the tag only keeps it from a
		// registry garbage collection meanwhile.
		log.Error(err, "Failed to tag the build context", "contextDigest", dig.String())
	}
	log.Info("Received a build context", "contextDigest", dig.String())
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"name": img.Spec.Name, "build": buildName,
		"status": build.Phase(), "context_digest": dig.String()})
}

// errUploaded is a build that another upload recorded first.
var errUploaded = errors.New("the build has its context already")

// claim records dig as build's context, moving it from UPLOADING to BUILDING, and answers 409 when another
// upload did so first. The status write carries the resourceVersion of the UPLOADING build it read, so of
// concurrent uploads, on one replica or several, the API server lets exactly one through; the others read the
// build again and find it BUILDING.
func (s *service) claim(w http.ResponseWriter, r *http.Request, build *gatewayv1.SandboxImageBuild, dig v1.Hash) bool {
	c := s.k.Opts.Client
	ctx := r.Context()
	err := kit.UpdateOnConflict(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(build), build); err != nil {
			return err
		}
		if build.Phase() != gatewayv1.SandboxUploading {
			return errUploaded
		}
		build.Status.ContextDigest, build.Status.Status = dig.String(), gatewayv1.SandboxBuilding
		return c.Status().Update(ctx, build)
	})
	switch {
	case errors.Is(err, errUploaded):
		s.uploaded(w, build)
		return false
	case err != nil:
		kit.WriteKubeError(w, r, "record the build context", err)
		return false
	}
	return true
}

// uploaded answers 409: build does not wait for an upload.
func (s *service) uploaded(w http.ResponseWriter, build *gatewayv1.SandboxImageBuild) {
	httperr.Write(w, http.StatusConflict, httperr.CodeConflict,
		fmt.Sprintf("Build %q does not wait for an upload (status %s): each push takes one upload.", build.Name, build.Phase()),
		[]httperr.FieldError{{Field: "build", Message: "must be UPLOADING"}})
}

// registryKeychain is the keychain of the workspace registry: its docker config Secret, anonymous when none.
func registryKeychain(r *http.Request, c client.Reader, ns string, reg *gatewayv1.ImageRegistry) (authn.Keychain, error) {
	if reg.SecretRef == nil {
		return authn.NewMultiKeychain(), nil
	}
	var sec corev1.Secret
	if err := c.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: reg.SecretRef.Name}, &sec); err != nil {
		return nil, fmt.Errorf("failed to read Secret %s: %w", reg.SecretRef.Name, err)
	}
	key := reg.SecretRef.Key
	if key == "" {
		key = gatewayv1.DockerConfigKey
	}
	kc, err := sandbox.ParseDockerConfig(sec.Data[key])
	if err != nil {
		return nil, fmt.Errorf("secret %s entry %s %w", reg.SecretRef.Name, key, err)
	}
	return kc, nil
}
