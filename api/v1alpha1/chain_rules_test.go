package v1alpha1

import (
	"strings"
	"testing"
)

func TestWorstStatus(t *testing.T) {
	for _, c := range []struct {
		in   []DeploymentStatus
		want DeploymentStatus
	}{
		{nil, StatusDeploying},
		{[]DeploymentStatus{StatusActive, StatusActive}, StatusActive},
		{[]DeploymentStatus{StatusActive, StatusScaledToZero}, StatusScaledToZero},
		{[]DeploymentStatus{StatusActive, ""}, StatusDeploying},
		{[]DeploymentStatus{StatusDeploying, StatusUnhealthy, StatusActive}, StatusUnhealthy},
		{[]DeploymentStatus{StatusInactive, StatusActive}, StatusInactive},
		{[]DeploymentStatus{StatusFailed, StatusDeployFailed, StatusBuildFailed}, StatusDeployFailed},
	} {
		if got := WorstStatus(c.in...); got != c.want {
			t.Errorf("WorstStatus(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestValidateChainDeploymentSpec(t *testing.T) {
	url := func(name string) Chainlet {
		return Chainlet{Name: name, Source: DeploymentSource{URL: "https://x.example.com/" + name}}
	}
	for _, c := range []struct {
		name string
		spec ChainDeploymentSpec
		want []string // field: rule substrings, in order
	}{
		{"valid", ChainDeploymentSpec{ChainID: "c", Entrypoint: "a", Chainlets: []Chainlet{url("a"), url("b")}}, nil},
		{"entrypoint not a chainlet", ChainDeploymentSpec{ChainID: "c", Entrypoint: "z", Chainlets: []Chainlet{url("a"), url("b")}},
			[]string{"spec.entrypoint: Invalid value: \"z\": entrypoint must name one of spec.chainlets (a, b)"}},
		{"duplicate names", ChainDeploymentSpec{ChainID: "c", Entrypoint: "a", Chainlets: []Chainlet{url("a"), url("a")}},
			[]string{"spec.chainlets[1].name: Duplicate value"}},
	} {
		errs := ValidateChainDeploymentSpec(&c.spec)
		if len(errs) != len(c.want) {
			t.Errorf("%s: got %v, want %d errors", c.name, errs, len(c.want))
			continue
		}
		for i, e := range errs {
			if !strings.Contains(e.Error(), c.want[i]) {
				t.Errorf("%s: error %d = %q, want it to contain %q", c.name, i, e.Error(), c.want[i])
			}
		}
	}
}

func TestChainletURLs(t *testing.T) {
	cd := &ChainDeployment{Spec: ChainDeploymentSpec{ChainID: "c", Entrypoint: "front", Chainlets: []Chainlet{
		{Name: "front", Source: DeploymentSource{Container: &ContainerSource{Image: "i", Port: 9000}}},
		{Name: "vllm", Source: DeploymentSource{Service: &ServiceSource{Name: "vllm", Port: 8000}}},
		{Name: "ext", Source: DeploymentSource{URL: "https://ext.example.com/base/"}},
	}}}
	cd.Name, cd.Namespace = "pipe-v1", "ws"
	got := cd.ChainletURLsJSON("ext")
	want := `{"front":"http://md-pipe-v1-front.ws.svc:9000","vllm":"http://vllm.ws.svc:8000"}`
	if got != want {
		t.Errorf("ChainletURLsJSON(ext) = %s, want %s", got, want)
	}
	if u := cd.ChainletURLs("front")["ext"]; u != "https://ext.example.com/base" {
		t.Errorf("the url chainlet's address = %q, want it without the trailing slash", u)
	}
	if id, ok := ChainOfModelID(ChainletModelID("pipe")); !ok || id != "pipe" {
		t.Errorf("ChainOfModelID(ChainletModelID(pipe)) = %q, %v", id, ok)
	}
	if _, ok := ChainOfModelID("sentiment"); ok {
		t.Error("a model's id read as a chain's")
	}
}
