package view

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/tryplan"
)

// update rewrites the golden files: go test ./gatewayd/view/ -update. Review the diff before committing.
var update = flag.Bool("update", false, "rewrite testdata/*.out.yaml from the current view")

// TestBuildGolden builds the view of every testdata/*.in.yaml (one snapshot per YAML document, one per
// workspace) and compares a dump of it with the matching *.out.yaml: per group and slug the limit plan in
// enforcement order with each bucket's metering group, the keys by prefix, the workspace keys and the routes. A
// snapshot the view refuses dumps its error instead.
func TestBuildGolden(t *testing.T) {
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
			got, err := yaml.Marshal(dumpOf(t, loadSnapshots(t, in)))
			if err != nil {
				t.Fatal(err)
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
			if diff := gocmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("view differs from %s (-want +got):\n%s", out, diff)
			}
		})
	}
}

func loadSnapshots(t *testing.T, path string) []*snapshot.Snapshot {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*snapshot.Snapshot
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		s := &snapshot.Snapshot{}
		if err := yaml.UnmarshalStrict(doc, s); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, s)
	}
}

// dump is the readable form of a built View.
type dump struct {
	Namespaces []namespaceDump `json:"namespaces,omitempty"`
	// KeysByPrefix lists, per prefix, the keys a lookup compares (namespace/id), across workspaces.
	KeysByPrefix map[string][]string `json:"keysByPrefix,omitempty"`
	Error        string              `json:"error,omitempty"`
}

type namespaceDump struct {
	Name          string         `json:"name"`
	Groups        []groupDump    `json:"groups"`
	WorkspaceKeys []string       `json:"workspaceKeys,omitempty"`
	Endpoints     []endpointDump `json:"endpoints,omitempty"`
	// TierPlans is, per workspace key prefix, its model-API tier plan, in the format of modelDump.Plan.
	TierPlans map[string][]string `json:"tierPlans,omitempty"`
	// SharedPlans is, per "federated key id slug", the plan of its calls to a shared model API Endpoint.
	SharedPlans map[string][]string `json:"sharedPlans,omitempty"`
}

type groupDump struct {
	ID     string      `json:"id"`
	Mode   string      `json:"mode"`
	Models []modelDump `json:"models"`
}

type modelDump struct {
	Slug string `json:"slug"`
	// Plan is one line per limit, in the order a call checks them: "TYPE/UNIT threshold bucket=<metering group>
	// source=<declaring group>".
	Plan []string `json:"plan"`
}

type endpointDump struct {
	Slug    string       `json:"slug"`
	Targets []targetDump `json:"targets"`
	Timeout string       `json:"timeout,omitempty"`
	Shared  bool         `json:"sharedModelAPI,omitempty"`
	// Policy is "attempts=N onStatus=[...] cooldown=F/D".
	Policy string `json:"policy"`
}

type targetDump struct {
	Name        string `json:"name"`
	Key         string `json:"key"`
	Provider    string `json:"provider"`
	BaseURL     string `json:"baseURL"`
	TargetModel string `json:"targetModel,omitempty"`
	Secret      string `json:"secret,omitempty"`
	Weight      int    `json:"weight"`
	Priority    int    `json:"priority"`
}

func dumpOf(t *testing.T, snaps []*snapshot.Snapshot) dump {
	t.Helper()
	v := Empty()
	store := limits.NewMemory()
	for _, s := range snaps {
		ns, err := Build(s, 1, "checksum", store, nil)
		if err != nil {
			return dump{Error: err.Error()}
		}
		v = v.With(ns)
	}
	var d dump
	for _, name := range v.Namespaces() {
		d.Namespaces = append(d.Namespaces, namespaceDumpOf(v.Namespace(name)))
	}
	d.KeysByPrefix = map[string][]string{}
	for _, ns := range v.slots {
		ns.eachKey(func(k *Key) {
			d.KeysByPrefix[k.Prefix] = append(d.KeysByPrefix[k.Prefix], k.Group.Namespace+"/"+k.ID+" -> group "+k.Group.ID)
		})
	}
	for _, keys := range d.KeysByPrefix {
		slices.Sort(keys)
	}
	return d
}

func namespaceDumpOf(ns *Namespace) namespaceDump {
	nd := namespaceDump{Name: ns.Name}
	for _, g := range ns.Groups {
		gd := groupDump{ID: g.ID, Mode: g.Mode}
		for _, m := range g.Models {
			md := modelDump{Slug: m.Slug, Plan: []string{}}
			md.Plan = planDump(m.Plan)
			gd.Models = append(gd.Models, md)
		}
		slices.SortFunc(gd.Models, func(a, b modelDump) int { return cmp.Compare(a.Slug, b.Slug) })
		nd.Groups = append(nd.Groups, gd)
	}
	slices.SortFunc(nd.Groups, func(a, b groupDump) int { return cmp.Compare(a.ID, b.ID) })
	for _, k := range ns.workspaceKeys {
		nd.WorkspaceKeys = append(nd.WorkspaceKeys, k.Prefix+" "+k.ID+" "+k.Record.Type)
	}
	slices.Sort(nd.WorkspaceKeys)
	for prefix, p := range ns.tier {
		if nd.TierPlans == nil {
			nd.TierPlans = map[string][]string{}
		}
		nd.TierPlans[prefix] = planDump(p)
	}
	ns.eachKey(func(k *Key) {
		for slug, p := range k.Shared {
			if nd.SharedPlans == nil {
				nd.SharedPlans = map[string][]string{}
			}
			nd.SharedPlans[k.ID+" "+slug] = planDump(p)
		}
	})
	for _, e := range ns.Endpoints {
		ed := endpointDump{Slug: e.Slug, Shared: e.SharedModelAPI, Policy: policyDump(e.Policy)}
		for i, t := range e.Targets {
			td := targetDump{Name: t.Name, Key: t.Key, Provider: t.Provider, BaseURL: t.BaseURL, TargetModel: t.TargetModel,
				Weight: e.Plan[i].Weight, Priority: e.Plan[i].Priority}
			if t.Secret != nil {
				td.Secret = t.Secret.Name + "/" + t.Secret.Key
			}
			ed.Targets = append(ed.Targets, td)
		}
		if e.Timeout > 0 {
			ed.Timeout = e.Timeout.String()
		}
		nd.Endpoints = append(nd.Endpoints, ed)
	}
	slices.SortFunc(nd.Endpoints, func(a, b endpointDump) int { return cmp.Compare(a.Slug, b.Slug) })
	return nd
}

// policyDump is an Endpoint's resolved retry and cooldown policy on one line.
func policyDump(p tryplan.Policy) string {
	var statuses []int
	for s := 400; s < 600; s++ {
		if p.Fail.Has(s) {
			statuses = append(statuses, s)
		}
	}
	return fmt.Sprintf("attempts=%d onStatus=%v cooldown=%d/%s", p.Attempts, statuses, p.Failures, p.Cooldown)
}

// planDump is one line per limit of p, in the order a call checks them: "TYPE/UNIT threshold bucket=<metering
// group>/<slug> source=<declaring group>"; a tier bucket's slug is the key's prefix.
func planDump(p *limits.Plan) []string {
	out := []string{}
	for _, l := range p.Limits {
		bucket := l.Key.Group
		if l.IsTier() {
			bucket += "/" + l.Key.Slug
		}
		out = append(out, fmt.Sprintf("%s/%s %d bucket=%s source=%s", l.Key.Type, l.Key.Unit, l.Threshold, bucket, l.SourceGroup))
	}
	return out
}
