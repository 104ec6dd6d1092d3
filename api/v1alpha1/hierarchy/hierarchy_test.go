package hierarchy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// TestResolve covers docs/limits.md "The rules" 5 (INDEPENDENT) and 6 (CASCADING), one case per
// rule, on the effective models of the group named by target.
func TestResolve(t *testing.T) {
	tests := []struct {
		name   string
		groups []*gatewayv1.Group
		target string
		want   []gatewayv1.EffectiveModel
	}{
		{
			name: "independent: a root resolves to its own limits",
			groups: []*gatewayv1.Group{
				grp("root", "", indep, mdl("a", lim(req, minute, 100), lim(tok, day, 5000))),
			},
			target: "root",
			want: []gatewayv1.EffectiveModel{{
				Slug:        "a",
				RateLimits:  []gatewayv1.EffectiveLimit{eff(req, minute, 100, "root")},
				UsageLimits: []gatewayv1.EffectiveLimit{eff(tok, day, 5000, "root")},
			}},
		},
		{
			name: "independent: each (slug, type, unit) resolves to the closest declaring group",
			groups: []*gatewayv1.Group{
				grp("root", "", indep, mdl("a", lim(req, minute, 100), lim(tok, minute, 1000), lim(tok, day, 9000))),
				grp("mid", "root", indep, mdl("a", lim(tok, minute, 800))),
				grp("leaf", "mid", indep, mdl("a", lim(req, minute, 50))),
			},
			target: "leaf",
			want: []gatewayv1.EffectiveModel{{
				Slug:        "a",
				RateLimits:  []gatewayv1.EffectiveLimit{eff(req, minute, 50, "leaf"), eff(tok, minute, 800, "mid")},
				UsageLimits: []gatewayv1.EffectiveLimit{eff(tok, day, 9000, "root")},
			}},
		},
		{
			name: "independent: a child may declare a threshold higher than its parent's",
			groups: []*gatewayv1.Group{
				grp("root", "", indep, mdl("a", lim(req, minute, 100))),
				grp("child", "root", indep, mdl("a", lim(req, minute, 500))),
			},
			target: "child",
			want: []gatewayv1.EffectiveModel{{
				Slug:       "a",
				RateLimits: []gatewayv1.EffectiveLimit{eff(req, minute, 500, "child")},
			}},
		},
		{
			name: "independent: a child may declare a threshold lower than its parent's",
			groups: []*gatewayv1.Group{
				grp("root", "", indep, mdl("a", lim(req, minute, 100))),
				grp("child", "root", indep, mdl("a", lim(req, minute, 7))),
			},
			target: "child",
			want: []gatewayv1.EffectiveModel{{
				Slug:       "a",
				RateLimits: []gatewayv1.EffectiveLimit{eff(req, minute, 7, "child")},
			}},
		},
		{
			name: "independent: same type with another unit is a different limit and is inherited",
			groups: []*gatewayv1.Group{
				grp("root", "", indep, mdl("a", lim(req, sec, 10))),
				grp("child", "root", indep, mdl("a", lim(req, minute, 300))),
			},
			target: "child",
			want: []gatewayv1.EffectiveModel{{
				Slug:       "a",
				RateLimits: []gatewayv1.EffectiveLimit{eff(req, minute, 300, "child"), eff(req, sec, 10, "root")},
			}},
		},
		{
			name: "independent: slugs are only the group's own, never an ancestor's",
			groups: []*gatewayv1.Group{
				grp("root", "", indep, mdl("a", lim(req, minute, 100)), mdl("b", lim(req, minute, 100))),
				grp("child", "root", indep, mdl("c"), mdl("a")),
			},
			target: "child",
			want: []gatewayv1.EffectiveModel{
				{Slug: "a", RateLimits: []gatewayv1.EffectiveLimit{eff(req, minute, 100, "root")}},
				{Slug: "c"},
			},
		},
		{
			name: "independent: a group with no models has no effective models",
			groups: []*gatewayv1.Group{
				grp("root", "", indep, mdl("a", lim(req, minute, 100))),
				grp("child", "root", indep),
			},
			target: "child",
			want:   []gatewayv1.EffectiveModel{},
		},
		{
			name: "cascading: every ancestor limit applies, each with its source, nearest first",
			groups: []*gatewayv1.Group{
				grp("root", "", cascade, mdl("a", lim(req, minute, 100), lim(tok, day, 9000))),
				grp("mid", "root", cascade, mdl("a", lim(req, minute, 50))),
				grp("leaf", "mid", cascade, mdl("a", lim(req, minute, 10), lim(tok, minute, 700))),
			},
			target: "leaf",
			want: []gatewayv1.EffectiveModel{{
				Slug: "a",
				RateLimits: []gatewayv1.EffectiveLimit{
					eff(req, minute, 10, "leaf"), eff(tok, minute, 700, "leaf"),
					eff(req, minute, 50, "mid"),
					eff(req, minute, 100, "root"),
				},
				UsageLimits: []gatewayv1.EffectiveLimit{eff(tok, day, 9000, "root")},
			}},
		},
		{
			name: "cascading: equal thresholds on two ancestors are two distinct limits",
			groups: []*gatewayv1.Group{
				grp("root", "", cascade, mdl("a", lim(req, minute, 100))),
				grp("mid", "root", cascade, mdl("a", lim(req, minute, 100))),
				grp("leaf", "mid", cascade, mdl("a")),
			},
			target: "leaf",
			want: []gatewayv1.EffectiveModel{{
				Slug:       "a",
				RateLimits: []gatewayv1.EffectiveLimit{eff(req, minute, 100, "mid"), eff(req, minute, 100, "root")},
			}},
		},
		{
			name: "cascading: an ancestor without the slug adds nothing, and slugs are only the group's own",
			groups: []*gatewayv1.Group{
				grp("root", "", cascade, mdl("b", lim(req, minute, 100))),
				grp("mid", "root", cascade, mdl("a", lim(tok, minute, 500))),
				grp("leaf", "mid", cascade, mdl("a")),
			},
			target: "leaf",
			want: []gatewayv1.EffectiveModel{{
				Slug:       "a",
				RateLimits: []gatewayv1.EffectiveLimit{eff(tok, minute, 500, "mid")},
			}},
		},
		{
			name: "slugs are sorted",
			groups: []*gatewayv1.Group{
				grp("root", "", indep, mdl("z"), mdl("b"), mdl("m")),
			},
			target: "root",
			want:   []gatewayv1.EffectiveModel{{Slug: "b"}, {Slug: "m"}, {Slug: "z"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := NewIndex(tc.groups)
			g, ok := ix.Get(tc.target)
			if !ok {
				t.Fatalf("target %q not in index", tc.target)
			}
			chain, status := ix.Chain(g)
			if !status.Complete() {
				t.Fatalf("chain %s is not complete: %+v", chain, status)
			}
			if diff := cmp.Diff(tc.want, Resolve(chain)); diff != "" {
				t.Errorf("Resolve(%s) mismatch (-want +got):\n%s", chain, diff)
			}
		})
	}
}

// TestResolveAncestorChangeFlowsToChildren is rule 5's "a change to the ancestor's threshold applies
// automatically to children that inherit it": only the index changes, the child object does not.
func TestResolveAncestorChangeFlowsToChildren(t *testing.T) {
	for _, mode := range []gatewayv1.LimitEnforcement{indep, cascade} {
		t.Run(string(mode), func(t *testing.T) {
			root := grp("root", "", mode, mdl("a", lim(req, minute, 100)))
			child := grp("child", "root", mode, mdl("a"))
			grandchild := grp("grandchild", "child", mode, mdl("a"))
			ix := NewIndex([]*gatewayv1.Group{root, child, grandchild})

			lowered := root.DeepCopy()
			lowered.Spec.Models[0].RateLimits[0].Threshold = 40
			ix = ix.With(lowered)

			for _, id := range []string{"child", "grandchild"} {
				g, _ := ix.Get(id)
				chain, _ := ix.Chain(g)
				want := []gatewayv1.EffectiveModel{{Slug: "a", RateLimits: []gatewayv1.EffectiveLimit{eff(req, minute, 40, "root")}}}
				if diff := cmp.Diff(want, Resolve(chain)); diff != "" {
					t.Errorf("%s after the root changed (-want +got):\n%s", id, diff)
				}
			}
		})
	}
}

func TestChain(t *testing.T) {
	tests := []struct {
		name       string
		groups     []*gatewayv1.Group
		target     string
		wantChain  string
		wantStatus ChainStatus
	}{
		{
			name:      "root",
			groups:    []*gatewayv1.Group{grp("r", "", indep)},
			target:    "r",
			wantChain: "r",
		},
		{
			name:      "three levels",
			groups:    []*gatewayv1.Group{grp("r", "", indep), grp("m", "r", indep), grp("l", "m", indep)},
			target:    "l",
			wantChain: "l <- m <- r",
		},
		{
			name:       "missing grandparent",
			groups:     []*gatewayv1.Group{grp("m", "ghost", indep), grp("l", "m", indep)},
			target:     "l",
			wantChain:  "l <- m",
			wantStatus: ChainStatus{MissingParent: "ghost"},
		},
		{
			name:       "self parent",
			groups:     []*gatewayv1.Group{grp("a", "a", indep)},
			target:     "a",
			wantChain:  "a",
			wantStatus: ChainStatus{Cycle: true},
		},
		{
			name:       "cycle above the group",
			groups:     []*gatewayv1.Group{grp("a", "b", indep), grp("b", "a", indep), grp("l", "a", indep)},
			target:     "l",
			wantChain:  "l <- a <- b",
			wantStatus: ChainStatus{Cycle: true},
		},
		{
			name:       "stops one step past the maximum depth",
			groups:     chainOf(8, indep),
			target:     "g8",
			wantChain:  "g8 <- g7 <- g6 <- g5 <- g4 <- g3",
			wantStatus: ChainStatus{TooDeep: true},
		},
		{
			name:      "a chain of exactly the maximum depth is complete",
			groups:    chainOf(5, indep),
			target:    "g5",
			wantChain: "g5 <- g4 <- g3 <- g2 <- g1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := NewIndex(tc.groups)
			g, _ := ix.Get(tc.target)
			chain, status := ix.Chain(g)
			if chain.String() != tc.wantChain {
				t.Errorf("chain = %q, want %q", chain, tc.wantChain)
			}
			if status != tc.wantStatus {
				t.Errorf("status = %+v, want %+v", status, tc.wantStatus)
			}
		})
	}
}

func TestIndexTraversal(t *testing.T) {
	ix := NewIndex([]*gatewayv1.Group{
		grp("r", "", indep), grp("b", "r", indep), grp("a", "r", indep), grp("a1", "a", indep), grp("a1x", "a1", indep),
	})
	var got []string
	for _, d := range ix.Descendants("r") {
		got = append(got, d.Name)
	}
	if diff := cmp.Diff([]string{"a", "b", "a1", "a1x"}, got); diff != "" {
		t.Errorf("Descendants(r) not parents-first, sorted by id (-want +got):\n%s", diff)
	}
	for id, want := range map[string]int{"r": 4, "a": 3, "b": 1, "a1x": 1, "missing": 1} {
		if h := ix.Height(id); h != want {
			t.Errorf("Height(%s) = %d, want %d", id, h, want)
		}
	}
}

// TestFetchAncestorsMatchesChain reads ancestors one get at a time, as admission and the REST API do, and
// requires the chain built from what was read to equal the chain over the whole workspace, with every get
// counted: a cycle, a missing parent and a chain past MaxDepth each stop the walk without reading further.
func TestFetchAncestorsMatchesChain(t *testing.T) {
	tests := []struct {
		name     string
		groups   []*gatewayv1.Group
		target   string
		maxReads int
	}{
		{"root", []*gatewayv1.Group{grp("r", "", indep)}, "r", 0},
		{"three levels", []*gatewayv1.Group{grp("r", "", indep), grp("m", "r", indep), grp("l", "m", indep)}, "l", 2},
		{"missing grandparent", []*gatewayv1.Group{grp("m", "ghost", indep), grp("l", "m", indep)}, "l", 2},
		{"cycle", []*gatewayv1.Group{grp("a", "b", indep), grp("b", "c", indep), grp("c", "a", indep)}, "a", 2},
		{"seven levels", chainOf(7, indep), "g7", gatewayv1.MaxDepth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := NewIndex(tt.groups)
			g, _ := ix.Get(tt.target)
			reads := 0
			got, err := FetchAncestors(g, func(id string) (*gatewayv1.Group, error) {
				reads++
				p, ok := ix.Get(id)
				if !ok {
					return nil, nil
				}
				return p, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if reads > tt.maxReads {
				t.Errorf("read %d groups, want at most %d", reads, tt.maxReads)
			}
			wantChain, wantStatus := ix.Chain(g)
			gotChain, gotStatus := NewIndex(got).With(g).Chain(g)
			if gotChain.String() != wantChain.String() || gotStatus != wantStatus {
				t.Errorf("chain from fetched ancestors = %s %+v, want %s %+v", gotChain, gotStatus, wantChain, wantStatus)
			}
		})
	}
}

func TestFetchAncestorsWrapsReadErrors(t *testing.T) {
	boom := errors.New("connection refused")
	_, err := FetchAncestors(grp("l", "m", indep), func(string) (*gatewayv1.Group, error) { return nil, boom })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "ancestor m of group l") {
		t.Fatalf("err = %v, want the read error wrapped with the ancestor's id", err)
	}
}
