// Package sandbox holds what gatewayd (which accepts pushes and uploads) and the manager (which imports and
// builds) must agree on about sandbox images: repository names and where a team's repository lives in the
// workspace registry, the tag of an uploaded build context, and credentials from a docker config.
package sandbox

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// MaxNameLength bounds a repository name (the CRD's MaxLength of spec.name).
const MaxNameLength = 200

// repositoryName is the distribution spec's repository path grammar, lowercase only.
var repositoryName = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)

// CheckName returns why n is not a valid repository name, nil when it is.
func CheckName(n string) error {
	switch {
	case n == "":
		return fmt.Errorf("must be at least 1 character")
	case len(n) > MaxNameLength:
		return fmt.Errorf("must be at most %d characters", MaxNameLength)
	case !repositoryName.MatchString(n):
		return fmt.Errorf("must be a registry repository name: lowercase letters and digits, joined by '.', '_', '__' or '-', in components separated by '/'")
	}
	return nil
}

// Repository is where the image name of team lives in reg: <url>/<team>/<name>. A url beginning with http://
// is a plain-HTTP registry (development only).
func Repository(reg *gatewayv1.ImageRegistry, team, image string) (name.Repository, error) {
	if reg == nil || reg.URL == "" {
		return name.Repository{}, fmt.Errorf("the Workspace has no spec.imageRegistry")
	}
	base, opts := reg.URL, []name.Option{name.StrictValidation}
	if rest, ok := strings.CutPrefix(base, "http://"); ok {
		base, opts = rest, append(opts, name.Insecure)
	}
	base = strings.TrimSuffix(strings.TrimPrefix(base, "https://"), "/")
	return name.NewRepository(base+"/"+team+"/"+image, opts...)
}

// registryPath is the repository prefix reg names: its url without scheme or trailing '/', lowercase.
func registryPath(reg *gatewayv1.ImageRegistry) string {
	if reg == nil {
		return ""
	}
	p := strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(reg.URL), "http://"), "https://")
	return strings.TrimSuffix(p, "/")
}

// within reports whether repository repo ("host/path") lies in the repository path prefix.
func within(repo, prefix string) bool {
	return prefix != "" && (repo == prefix || strings.HasPrefix(repo, prefix+"/"))
}

// CheckOwnPath returns why the workspace of namespace ns may not read ref: ref lies in the registry path of a
// Workspace of another namespace. A workspace registry's path is bound to the namespace whose Workspace names it,
// so one workspace cannot import, or build FROM, another's images out of a registry they share, even one that
// lets anyone read (docs/security.md "Registry paths are bound to their workspace"). The error names the path,
// not the workspace that owns it.
func CheckOwnPath(ref name.Reference, ns string, workspaces []gatewayv1.Workspace) error {
	repo := strings.ToLower(ref.Context().Name())
	for i := range workspaces {
		ws := &workspaces[i]
		if ws.Namespace == ns || ws.DeletionTimestamp != nil {
			continue
		}
		if p := registryPath(ws.Spec.ImageRegistry); within(repo, p) {
			return fmt.Errorf("is in the repository path %s, which belongs to another workspace: a workspace reads only its own path of a shared registry", p)
		}
	}
	return nil
}

// ContextTag is the tag of the build context that build's upload pushed: the registry, not any replica's disk,
// holds it until the manager builds.
func ContextTag(build string) string { return "context-" + build }

// ContextMediaType is the artifact type of an uploaded build context (a ZIP, carried as one layer).
const ContextMediaType = "application/vnd.modelgate.sandbox.context.v1+json"

// dockerConfig is the part of a docker config.json that holds credentials.
type dockerConfig struct {
	Auths map[string]struct {
		Auth          string `json:"auth"`
		Username      string `json:"username"`
		Password      string `json:"password"`
		IdentityToken string `json:"identitytoken"`
		RegistryToken string `json:"registrytoken"`
	} `json:"auths"`
}

// ParseDockerConfig checks raw is a docker config JSON ({"auths": {...}}) and returns its keychain. Errors never
// quote the input, which holds credentials.
func ParseDockerConfig(raw []byte) (authn.Keychain, error) {
	var cfg dockerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("is not a docker config JSON object")
	}
	if cfg.Auths == nil {
		return nil, fmt.Errorf("has no auths object")
	}
	kc := keychain{}
	for host, a := range cfg.Auths {
		ac := authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
		if a.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("has an auth entry that is not base64")
			}
			user, pass, ok := strings.Cut(string(dec), ":")
			if !ok {
				return nil, fmt.Errorf("has an auth entry that is not user:password")
			}
			ac.Username, ac.Password = user, pass
		}
		kc[normalizeHost(host)] = ac
	}
	return kc, nil
}

// keychain resolves a registry to the credentials its docker config lists, anonymous when none.
type keychain map[string]authn.AuthConfig

func (k keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if ac, ok := k[normalizeHost(r.RegistryStr())]; ok {
		return authn.FromConfig(ac), nil
	}
	return authn.Anonymous, nil
}

// normalizeHost maps the spellings docker uses for a registry onto its host: https://index.docker.io/v1/ and
// index.docker.io are Docker Hub.
func normalizeHost(h string) string {
	h = strings.TrimPrefix(strings.TrimPrefix(h, "https://"), "http://")
	h, _, _ = strings.Cut(h, "/")
	if h == "docker.io" || h == "registry-1.docker.io" {
		return name.DefaultRegistry
	}
	return h
}
