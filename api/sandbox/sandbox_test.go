package sandbox

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

func TestCheckName(t *testing.T) {
	for n, ok := range map[string]bool{
		"agent": true, "agents/python_3.12-slim": true, "a__b": true, "a---b": true, "a/b/c": true,
		"": false, "Agent": false, "-a": false, "a-": false, "a//b": false, "/a": false, "a/": false, "a b": false,
		"a:b": false, "a@b": false, strings.Repeat("a", MaxNameLength): true, strings.Repeat("a", MaxNameLength+1): false,
	} {
		if err := CheckName(n); (err == nil) != ok {
			t.Errorf("CheckName(%q) = %v, want ok=%v", n, err, ok)
		}
	}
}

func TestRepository(t *testing.T) {
	r, err := Repository(&gatewayv1.ImageRegistry{URL: "http://127.0.0.1:5000/sandboxes/"}, "red", "agents/runner")
	if err != nil || r.String() != "127.0.0.1:5000/sandboxes/red/agents/runner" || r.Scheme() != "http" {
		t.Fatalf("Repository = %v (%s), %v", r, r.Scheme(), err)
	}
	r, err = Repository(&gatewayv1.ImageRegistry{URL: "registry.example.com/sb"}, "red", "x")
	if err != nil || r.String() != "registry.example.com/sb/red/x" || r.Scheme() != "https" {
		t.Fatalf("Repository = %v (%s), %v", r, r.Scheme(), err)
	}
	if _, err := Repository(nil, "red", "x"); err == nil || !strings.Contains(err.Error(), "imageRegistry") {
		t.Fatalf("no registry: %v", err)
	}
}

func TestParseDockerConfig(t *testing.T) {
	cfg := `{"auths": {"ghcr.io": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("u:p4ss")) + `"},
		"https://index.docker.io/v1/": {"username": "hub", "password": "hubpass"}}}`
	kc, err := ParseDockerConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]authn.AuthConfig{
		"ghcr.io/org/app:1":   {Username: "u", Password: "p4ss"},
		"docker.io/library/x": {Username: "hub", Password: "hubpass"},
		"quay.io/x/y":         {},
	} {
		r, _ := name.ParseReference(ref)
		a, err := kc.Resolve(r.Context())
		if err != nil {
			t.Fatal(err)
		}
		got, _ := a.Authorization()
		if got.Username != want.Username || got.Password != want.Password {
			t.Errorf("%s: %+v, want %+v", ref, got, want)
		}
	}
	for _, bad := range []string{`nope`, `{}`, `{"auths": {"x": {"auth": "!!"}}}`, `{"auths": {"x": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("nocolon")) + `"}}}`} {
		_, err := ParseDockerConfig([]byte(bad))
		if err == nil {
			t.Errorf("%s accepted", bad)
		} else if strings.Contains(err.Error(), "nocolon") || strings.Contains(err.Error(), "!!") {
			t.Errorf("the error quotes the input: %v", err)
		}
	}
}

// TestCheckOwnPath: a reference into another namespace's workspace registry path is refused, whatever its tag or
// digest; one into the caller's own path, or into no workspace's path, is not.
func TestCheckOwnPath(t *testing.T) {
	ws := func(ns, url string) gatewayv1.Workspace {
		w := gatewayv1.Workspace{}
		w.Namespace, w.Name = ns, "default"
		w.Spec.ImageRegistry = &gatewayv1.ImageRegistry{URL: url}
		return w
	}
	workspaces := []gatewayv1.Workspace{ws("a", "http://reg.example:5000/sandboxes/a/"), ws("b", "reg.example:5000/sandboxes/b"),
		ws("c", "reg.example/sandboxes/c"), ws("d", "docker.io/tenants/d"), ws("e", "http://[::1]:5000/sandboxes/e"),
		ws("f", "127.0.0.1:5000/f")}
	for ref, want := range map[string]string{
		"reg.example:5000/sandboxes/a/red/agent:latest":                            "repository path reg.example:5000/sandboxes/a, which belongs to another workspace",
		"reg.example:5000/sandboxes/a/red/agent@sha256:" + strings.Repeat("0", 64): "reg.example:5000/sandboxes/a,",
		"reg.example:5000/sandboxes/a:1":                                           "reg.example:5000/sandboxes/a,",
		"reg.example:5000/sandboxes/b/red/agent:v1":                                "",
		"reg.example:5000/sandboxes/ab/x:1":                                        "",
		"reg.example:5000/library/python:3.12":                                     "",
		"docker.io/library/python:3.12":                                            "",
		// Another spelling of the same registry host is the same host.
		"REG.example.:05000/sandboxes/a/red/agent:1": "reg.example:5000/sandboxes/a,",
		"reg.example/sandboxes/c/red/agent:1":        "reg.example/sandboxes/c,",
		"reg.example:443/sandboxes/c/red/agent:1":    "reg.example/sandboxes/c,",
		"reg.example:8443/sandboxes/c/red/agent:1":   "",
		"docker.io/tenants/d/red/agent:1":            "docker.io/tenants/d,",
		"[0:0::1]:5000/sandboxes/e/red/agent:1":      "[::1]:5000/sandboxes/e,",
		"[::ffff:127.0.0.1]:5000/f/red/agent:1":      "127.0.0.1:5000/f,",
		// A path that a proxy merging slashes or resolving dot segments would turn into another workspace's.
		"reg.example:5000/sandboxes/b/../a/red/agent:1": `dot segment ".."`,
		"reg.example:5000/sandboxes/b/./x:1":            `dot segment "."`,
		"reg.example:5000//sandboxes/a/red/agent:1":     "empty repository path component",
		"reg.example:5000/sandboxes//a/red/agent:1":     "empty repository path component",
		"reg.example:5000/sandboxes/a/red/agent/:1":     "empty repository path component",
		"reg.example:5000/sandboxes/b/-x:1":             "not a registry repository name",
	} {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckOwnPath(r, "b", workspaces)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckOwnPath(%s) = %v, want nil", ref, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckOwnPath(%s) = %v, want an error containing %q", ref, err, want)
		}
	}
}

// TestParseReference: a reference whose repository path has a dot segment or an empty component is refused before
// anyone sends it to a registry; references as docker reads them are accepted.
func TestParseReference(t *testing.T) {
	for ref, want := range map[string]string{
		"ghcr.io/org/app:1.2": "",
		"python:3.12":         "",
		"127.0.0.1:5000/sandboxes/red/agent@sha256:" + strings.Repeat("a", 64): "",
		"127.0.0.1:5000/sandboxes/red/../blue/agent:v1":                        `dot segment ".."`,
		"127.0.0.1:5000/sandboxes/./blue/agent:v1":                             `dot segment "."`,
		"127.0.0.1:5000//sandboxes/blue/agent:v1":                              "empty repository path component",
		"127.0.0.1:5000/sandboxes/blue/agent/:v1":                              "empty repository path component",
		"127.0.0.1:5000/sandboxes/blue/.agent:v1":                              "not a registry repository name",
		"127.0.0.1:5000/Sandboxes/x:1":                                         "not an image reference",
		"ghcr.io/org/app:":                                                     "not an image reference",
	} {
		_, err := ParseReference(ref)
		switch {
		case want == "" && err != nil:
			t.Errorf("ParseReference(%s) = %v, want nil", ref, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("ParseReference(%s) = %v, want an error containing %q", ref, err, want)
		}
	}
}
