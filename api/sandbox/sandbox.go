// Package sandbox holds what gatewayd (which accepts pushes and uploads) and the manager (which imports and
// builds) must agree on about sandbox images: repository names and where a team's repository lives in the
// workspace registry, the tag of an uploaded build context, and credentials from a docker config.
package sandbox

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
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

// ParseReference parses an image reference (as docker reads one: a missing registry is Docker Hub, a missing tag
// latest) and refuses one whose repository path is not in the distribution spec's grammar: an empty component
// ("//", a leading or trailing '/') or a dot segment ("." or ".."). go-containerregistry accepts both and sends the
// path to the registry unchanged, and a registry behind a proxy that merges slashes or resolves dot segments would
// serve another repository than the text names (docs/security.md "Registry paths are bound to their workspace").
func ParseReference(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("is not an image reference (registry/repository:tag or @digest)")
	}
	if err := checkRepositoryPath(r.Context().RepositoryStr()); err != nil {
		return nil, err
	}
	return r, nil
}

// checkRepositoryPath returns why the repository path p (without its registry) is not in the distribution
// spec's grammar, naming the first component that breaks it.
func checkRepositoryPath(p string) error {
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "":
			return fmt.Errorf("has an empty repository path component ('//', or a '/' at either end of the path)")
		case c == "." || c == "..":
			return fmt.Errorf("has the dot segment %q in its repository path: each component must be lowercase letters and digits, joined by '.', '_', '__' or '-'", c)
		}
	}
	if !repositoryName.MatchString(p) {
		return fmt.Errorf("has a repository path that is not a registry repository name: lowercase letters and digits, joined by '.', '_', '__' or '-', in components separated by '/'")
	}
	return nil
}

// location is a registry repository prefix as CheckOwnPath compares it: the host lowercased without a trailing
// dot, the port as a number ("" when none is written, which is either default port, 80 or 443, depending on the
// scheme a client picks), and the path; spelled is how the Workspace wrote it, for messages.
type location struct {
	host, port, path, spelled string
}

// splitHost splits hostport into the host, lowercased without a trailing dot (Docker Hub's spellings as one, an IP
// address in its shortest form), and the port as a number.
func splitHost(hostport string) (host, port string) {
	host = strings.ToLower(hostport)
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host, port = host[:i], host[i+1:]
		if n, err := strconv.ParseUint(port, 10, 16); err == nil {
			port = strconv.FormatUint(n, 10)
		}
	}
	if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		return ip.Unmap().String(), port
	}
	return normalizeHost(strings.TrimSuffix(host, ".")), port
}

// samePort reports whether two ports may reach one listener: equal, or one unwritten and the other a default.
func samePort(a, b string) bool {
	isDefault := func(p string) bool { return p == "" || p == "80" || p == "443" }
	return a == b || (a == "" && isDefault(b)) || (b == "" && isDefault(a))
}

// registryLocation is where reg's repositories live; ok is false when reg names none.
func registryLocation(reg *gatewayv1.ImageRegistry) (location, bool) {
	if reg == nil {
		return location{}, false
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(reg.URL), "http://"), "https://")
	rest = strings.Trim(rest, "/")
	hostport, p, _ := strings.Cut(rest, "/")
	if hostport == "" {
		return location{}, false
	}
	host, port := splitHost(hostport)
	return location{host: host, port: port, path: strings.Trim(p, "/"), spelled: rest}, true
}

// holds reports whether repository r lies at or below l.
func (l location) holds(r name.Repository) bool {
	host, port := splitHost(r.RegistryStr())
	if host != l.host || !samePort(port, l.port) {
		return false
	}
	p := strings.ToLower(r.RepositoryStr())
	return l.path == "" || p == l.path || strings.HasPrefix(p, l.path+"/")
}

// CheckOwnPath returns why the workspace of namespace ns may not read ref: its repository path is not in the
// distribution spec's grammar (see ParseReference), or it lies in the registry path of a Workspace of another
// namespace. A workspace registry's path is bound to the namespace whose Workspace names it, so one workspace
// cannot import, or build FROM, another's images out of a registry they share, even one that lets anyone read
// (docs/security.md "Registry paths are bound to their workspace"). Hosts are compared in one spelling (case, a
// trailing dot, an IP address's form, the port as a number; an unwritten port matches either default). The error names the path as the
// Workspace spells it, not the workspace that owns it.
func CheckOwnPath(ref name.Reference, ns string, workspaces []gatewayv1.Workspace) error {
	repo := ref.Context()
	if err := checkRepositoryPath(repo.RepositoryStr()); err != nil {
		return err
	}
	for i := range workspaces {
		ws := &workspaces[i]
		if ws.Namespace == ns || ws.DeletionTimestamp != nil {
			continue
		}
		if l, ok := registryLocation(ws.Spec.ImageRegistry); ok && l.holds(repo) {
			return fmt.Errorf("is in the repository path %s, which belongs to another workspace: a workspace reads only its own path of a shared registry", l.spelled)
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
