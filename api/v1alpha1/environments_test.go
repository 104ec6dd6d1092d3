package v1alpha1

import (
	"slices"
	"testing"
)

// Both kinds answer the same questions about the same pointers.
func TestEnvironmental(t *testing.T) {
	model := &Model{Spec: ModelSpec{Development: "d2", Environments: []ModelEnvironment{
		{Name: "production", Deployment: "d1"}, {Name: "staging"}, {Name: "canary", Deployment: "d2"}}}}
	chain := &Chain{Spec: ChainSpec{Development: "d2", Environments: []ChainEnvironment{
		{Name: "production", Deployment: "d1"}, {Name: "staging"}, {Name: "canary", Deployment: "d2"}}}}
	for name, o := range map[string]Environmental{"Model": model, "Chain": chain} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, p := range o.EnvironmentPointers() {
				got = append(got, p.Name+"="+p.Deployment+"@"+p.Path.String())
			}
			want := []string{"production=d1@spec.environments[0].deployment", "staging=@spec.environments[1].deployment",
				"canary=d2@spec.environments[2].deployment", "development=d2@spec.development"}
			if !slices.Equal(got, want) {
				t.Errorf("EnvironmentPointers = %v, want %v", got, want)
			}
			for _, c := range []struct {
				env, want string
				ok        bool
			}{
				{"production", "d1", true}, {"staging", "", true}, {"development", "d2", true}, {"nope", "", false},
			} {
				if d, ok := o.Environment(c.env); d != c.want || ok != c.ok {
					t.Errorf("Environment(%q) = %q, %v; want %q, %v", c.env, d, ok, c.want, c.ok)
				}
			}
			if got := o.EnvironmentsOf("d2"); !slices.Equal(got, []string{"canary", "development"}) {
				t.Errorf("EnvironmentsOf(d2) = %v, want [canary development]", got)
			}
			if got := o.EnvironmentsOf(""); got != nil {
				t.Errorf("EnvironmentsOf(\"\") = %v, want none: an empty pointer serves nothing", got)
			}
			o.PointEnvironment("staging", "d3")
			o.PointEnvironment("development", "d3")
			o.PointEnvironment("nope", "d4")
			if got := o.EnvironmentsOf("d3"); !slices.Equal(got, []string{"development", "staging"}) {
				t.Errorf("after PointEnvironment, EnvironmentsOf(d3) = %v, want [development staging]", got)
			}
			if got := o.EnvironmentsOf("d4"); got != nil || len(o.EnvironmentPointers()) != 4 {
				t.Errorf("PointEnvironment of an unknown environment changed something: %v", o.EnvironmentPointers())
			}
		})
	}
	var none *Model
	if got := none.EnvironmentPointers(); got != nil {
		t.Errorf("a nil Model's pointers = %v, want none (an admission create has no old object)", got)
	}
	if d, ok := (&Chain{}).Environment(EnvironmentDevelopment); d != "" || ok {
		t.Errorf("development of a chain without spec.development = %q, %v; want absent", d, ok)
	}
}

// A pointer that could name no object is invalid at its path; an empty one (nothing promoted) is not.
func TestInvalidPointer(t *testing.T) {
	m := &Model{Spec: ModelSpec{Development: "../../x", Environments: []ModelEnvironment{
		{Name: "production", Deployment: "v1"}, {Name: "staging"}, {Name: "canary", Deployment: "a/b"}, {Name: "qa", Deployment: "V1"}}}}
	var got []string
	for _, p := range m.EnvironmentPointers() {
		if err := p.InvalidPointer(); err != nil {
			got = append(got, err.Field)
		}
	}
	want := []string{"spec.environments[2].deployment", "spec.environments[3].deployment", "spec.development"}
	if !slices.Equal(got, want) {
		t.Errorf("invalid pointers at %v, want %v", got, want)
	}
}
