package view

import (
	"strconv"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/limits"
)

// BenchmarkBuild10kGroupsTier is the part of a snapshot load the model-API tier adds at its worst: the view of
// bigSnapshot (10,000 groups, one key each) built with and without a Workspace tier and every Endpoint a shared
// model API, so every key gets a group-plus-tier plan bound. Groups are reused from the view being served, as in
// BenchmarkDecodeAndSwap10kGroups, so what remains is mostly the per-key work.
func BenchmarkBuild10kGroupsTier(b *testing.B) {
	for _, tier := range []bool{false, true} {
		name := "no-tier"
		s := bigSnapshot(10000)
		if tier {
			name = "tier-all-shared"
			s.Workspace.ModelAPILimits = &snapshot.ModelAPILimits{RequestsPerMinute: 60, TokensPerMinute: 100000}
			for i := range s.Endpoints {
				s.Endpoints[i].SharedModelAPI = true
			}
		}
		b.Run(name+"/first-load", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(s, 1, "x", limits.NewMemory(), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/reload", func(b *testing.B) {
			store := limits.NewMemory()
			prev, err := Build(s, 1, "x", store, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if prev, err = Build(s, 2, "x", store, prev); err != nil {
					b.Fatal(err)
				}
			}
			if tier && len(prev.keyBlocks[0].keys[0].Shared) != 1 {
				b.Fatal("keys got no shared plan")
			}
		})
	}
}

// tierSnapshot is one group g with slug a (REQUEST per MINUTE at groupRPM), its key, a workspace key, and the
// Endpoint of a, shared or not, under a tier of rpm requests per minute (none when 0). Each call builds new
// records, as each snapshot load decodes new ones.
func tierSnapshot(groupRPM, rpm int64, shared bool) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Namespace: "ns",
		Groups: []snapshot.Group{{ID: "g", ExternalEntityID: "ext-g", Mode: "INDEPENDENT", Depth: 1, Models: []snapshot.Model{
			{Slug: "a", RateLimits: []snapshot.Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: groupRPM, SourceGroup: "g"}}}}}},
		APIKeys:          []snapshot.APIKey{{ID: "k", Prefix: "mgk_keyofgroupg1", Hash: strings.Repeat("a", 64), GroupID: "g"}},
		WorkspaceAPIKeys: []snapshot.WorkspaceAPIKey{{ID: "w", Prefix: "mgw_workspacekey", Hash: strings.Repeat("b", 64), Type: "WORKSPACE_INVOKE"}},
		Endpoints: []snapshot.Endpoint{{ID: "a", Slug: "a", SharedModelAPI: shared,
			Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: "http://upstream:8000/v1"}}}},
	}
	if rpm > 0 {
		s.Workspace.ModelAPILimits = &snapshot.ModelAPILimits{RequestsPerMinute: rpm}
	}
	return s
}

// thresholds lists a plan's limits as "group:threshold" or "tier:threshold"; "none" for no plan.
func thresholds(p *limits.Plan) string {
	if p == nil {
		return "none"
	}
	var out []string
	for _, l := range p.Limits {
		kind := "group"
		if l.IsTier() {
			kind = "tier"
		}
		out = append(out, kind+":"+strconv.FormatInt(l.Threshold, 10))
	}
	return strings.Join(out, " ")
}

// TestTierPlansFollowEachLoad: a load that changes nothing keeps the bound plans of the view being served, and a
// load that changes the group, the tier or the shared flag gives the key plans of the new values.
func TestTierPlansFollowEachLoad(t *testing.T) {
	store := limits.NewMemory()
	var prev *Namespace
	for i, step := range []struct {
		name          string
		snap          *snapshot.Snapshot
		shared, alone string
		reused        bool
	}{
		{"first load", tierSnapshot(10, 5, true), "group:10 tier:5", "tier:5", false},
		{"nothing changed", tierSnapshot(10, 5, true), "group:10 tier:5", "tier:5", true},
		{"group threshold changed", tierSnapshot(20, 5, true), "group:20 tier:5", "tier:5", false},
		{"tier changed", tierSnapshot(20, 7, true), "group:20 tier:7", "tier:7", false},
		{"Endpoint no longer shared", tierSnapshot(20, 7, false), "group:20", "tier:7", false},
		{"shared again", tierSnapshot(20, 7, true), "group:20 tier:7", "tier:7", false},
		{"tier removed", tierSnapshot(20, 0, true), "group:20", "none", false},
	} {
		ns, err := Build(step.snap, int64(i+1), "x", store, prev)
		if err != nil {
			t.Fatal(err)
		}
		k := ns.keyAt(0)
		plan := k.PlanFor(k.Group.Models["a"])
		if got := thresholds(plan); got != step.shared {
			t.Errorf("%s: federated key's plan on a = %s, want %s", step.name, got, step.shared)
		}
		if got := thresholds(ns.TierPlan("mgw_workspacekey")); got != step.alone {
			t.Errorf("%s: workspace key's tier plan = %s, want %s", step.name, got, step.alone)
		}
		if prev != nil {
			prevPlan := prev.keyAt(0).PlanFor(prev.keyAt(0).Group.Models["a"])
			if reused := plan == prevPlan; reused != step.reused {
				t.Errorf("%s: plan reused from the view being served = %v, want %v", step.name, reused, step.reused)
			}
		}
		prev = ns
	}
}
