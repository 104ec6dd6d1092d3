package translate

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// update rewrites the golden files: go test ./controllers/translate/ -update. Review the diff before committing.
var update = flag.Bool("update", false, "rewrite testdata/*.out.yaml from the current translation")

// TestTranslateGolden translates every testdata/*.in.yaml (the custom resources of one workspace, as a
// multi-document YAML stream) and compares the snapshot with the matching *.out.yaml.
func TestTranslateGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no golden inputs in testdata")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			input := loadInput(t, in)
			got, err := yaml.Marshal(Translate(input))
			if err != nil {
				t.Fatalf("failed to marshal snapshot: %v", err)
			}
			out := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(out, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("failed to read golden file (run with -update to create it): %v", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("snapshot differs from %s (-want +got):\n%s", out, diff)
			}
		})
	}
}

// TestTranslateIsDeterministic guards the promise that equal inputs encode to equal bytes whatever the order
// in which the API server listed the objects.
func TestTranslateIsDeterministic(t *testing.T) {
	in := loadInput(t, filepath.Join("testdata", "cascading-tree.in.yaml"))
	first, _ := yaml.Marshal(Translate(in))
	reversed := in
	reversed.Groups = append([]gatewayv1.Group(nil), in.Groups...)
	for i, j := 0, len(reversed.Groups)-1; i < j; i, j = i+1, j-1 {
		reversed.Groups[i], reversed.Groups[j] = reversed.Groups[j], reversed.Groups[i]
	}
	second, _ := yaml.Marshal(Translate(reversed))
	if !bytes.Equal(first, second) {
		t.Errorf("translation depends on input order:\n%s", cmp.Diff(string(first), string(second)))
	}
}

func loadInput(t *testing.T, path string) Input {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := gatewayv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	in := Input{Namespace: "default"}
	for i, doc := range strings.Split(string(raw), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		switch o := obj.(type) {
		case *gatewayv1.Workspace:
			in.Workspaces = append(in.Workspaces, *o)
		case *gatewayv1.Group:
			in.Groups = append(in.Groups, *o)
		case *gatewayv1.APIKey:
			in.APIKeys = append(in.APIKeys, *o)
		case *gatewayv1.WorkspaceAPIKey:
			in.WorkspaceAPIKeys = append(in.WorkspaceAPIKeys, *o)
		case *gatewayv1.Endpoint:
			in.Endpoints = append(in.Endpoints, *o)
		case *gatewayv1.Model:
			in.Models = append(in.Models, *o)
		case *gatewayv1.ModelDeployment:
			in.ModelDeployments = append(in.ModelDeployments, *o)
		case *gatewayv1.Team:
			in.Teams = append(in.Teams, *o)
		case *gatewayv1.Chain:
			in.Chains = append(in.Chains, *o)
		case *gatewayv1.ChainDeployment:
			in.ChainDeployments = append(in.ChainDeployments, *o)
		default:
			t.Fatalf("%s: document %d: unexpected kind %T", path, i, obj)
		}
	}
	return in
}
