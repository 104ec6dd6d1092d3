// Package hierarchy resolves and validates group trees. It is pure: callers hand it the groups of one
// workspace, and the admission webhook, the Group reconciler and the REST API all run the same functions, so a
// rule cannot drift between the place that refuses a write and the place that reports status.
package hierarchy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Index holds the groups of one workspace by id.
type Index struct {
	byID     map[string]*gatewayv1.Group
	children map[string][]*gatewayv1.Group
}

// NewIndex indexes groups. The caller decides which groups count (for example, leaving out those being deleted).
func NewIndex(groups []*gatewayv1.Group) *Index {
	ix := &Index{byID: make(map[string]*gatewayv1.Group, len(groups)), children: map[string][]*gatewayv1.Group{}}
	for _, g := range groups {
		ix.byID[g.Name] = g
	}
	for _, g := range ix.byID {
		if p := g.ParentID(); p != "" {
			ix.children[p] = append(ix.children[p], g)
		}
	}
	for _, kids := range ix.children {
		slices.SortFunc(kids, func(a, b *gatewayv1.Group) int { return strings.Compare(a.Name, b.Name) })
	}
	return ix
}

// With returns a copy of the index in which g replaces the group of the same id, as admission sees a write.
func (ix *Index) With(g *gatewayv1.Group) *Index {
	groups := make([]*gatewayv1.Group, 0, len(ix.byID)+1)
	for id, other := range ix.byID {
		if id != g.Name {
			groups = append(groups, other)
		}
	}
	return NewIndex(append(groups, g))
}

// Get returns the group with the given id.
func (ix *Index) Get(id string) (*gatewayv1.Group, bool) {
	g, ok := ix.byID[id]
	return g, ok
}

// Descendants returns every group below id, parents before children. A cycle is not followed twice.
func (ix *Index) Descendants(id string) []*gatewayv1.Group {
	var out []*gatewayv1.Group
	seen := map[string]bool{id: true}
	queue := []string{id}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range ix.children[cur] {
			if seen[c.Name] {
				continue
			}
			seen[c.Name] = true
			out = append(out, c)
			queue = append(queue, c.Name)
		}
	}
	return out
}

// Height is the number of levels from id down to its deepest descendant, 1 for a leaf.
func (ix *Index) Height(id string) int {
	return ix.height(id, map[string]bool{})
}

func (ix *Index) height(id string, onPath map[string]bool) int {
	if onPath[id] {
		return 0
	}
	onPath[id] = true
	defer delete(onPath, id)
	h := 0
	for _, c := range ix.children[id] {
		h = max(h, ix.height(c.Name, onPath))
	}
	return h + 1
}

// Chain is a group followed by its ancestors, nearest first: Chain[0] is the group, the last element the
// topmost ancestor that could be found.
type Chain []*gatewayv1.Group

// ChainStatus says how far a chain could be followed.
type ChainStatus struct {
	// MissingParent is the id of the first ancestor that does not exist, "" when the chain reaches a root.
	MissingParent string
	// Cycle is true when following parents returns to a group already on the chain.
	Cycle bool
	// TooDeep is true when the chain was cut one level past MaxDepth without reaching a root.
	TooDeep bool
}

// Complete is true when the chain ends at a root.
func (s ChainStatus) Complete() bool { return s.MissingParent == "" && !s.Cycle && !s.TooDeep }

// Chain follows g's parents. It stops at a root, at a missing parent, at a cycle, or one step past MaxDepth
// (enough to tell that the depth is exceeded).
func (ix *Index) Chain(g *gatewayv1.Group) (Chain, ChainStatus) {
	chain := Chain{g}
	seen := map[string]bool{g.Name: true}
	cur := g
	for len(chain) <= gatewayv1.MaxDepth {
		pid := cur.ParentID()
		if pid == "" {
			return chain, ChainStatus{}
		}
		if seen[pid] {
			return chain, ChainStatus{Cycle: true}
		}
		parent, ok := ix.byID[pid]
		if !ok {
			return chain, ChainStatus{MissingParent: pid}
		}
		seen[pid] = true
		chain = append(chain, parent)
		cur = parent
	}
	if cur.ParentID() == "" {
		return chain, ChainStatus{}
	}
	return chain, ChainStatus{TooDeep: true}
}

// Root is the topmost group of the chain.
func (c Chain) Root() *gatewayv1.Group { return c[len(c)-1] }

// Resolve returns the effective models of chain[0], the limits the runtime enforces, for both modes as
// docs/limits.md "The rules" 5 and 6 define them. The slugs are exactly chain[0]'s own models; the limits of
// each slug come from the chain:
//   - INDEPENDENT: each (type, unit) resolves to the closest group that declares it, self included.
//   - CASCADING: every limit that any group on the chain declares for the slug applies, each anchored to its
//     declaring group, nearest first.
//
// Slugs are sorted; within a slug, limits are ordered nearest group first, then by type and unit.
func Resolve(chain Chain) []gatewayv1.EffectiveModel {
	self := chain[0]
	cascading := chain.Root().Enforcement() == gatewayv1.EnforcementCascading
	out := make([]gatewayv1.EffectiveModel, 0, len(self.Spec.Models))
	for _, m := range self.Spec.Models {
		em := gatewayv1.EffectiveModel{Slug: m.Slug}
		seenRate, seenUsage := map[limitKey]bool{}, map[limitKey]bool{}
		for _, g := range chain {
			declared := modelOf(g, m.Slug)
			if declared == nil {
				continue
			}
			em.RateLimits = appendEffective(em.RateLimits, declared.RateLimits, g.Name, seenRate, cascading)
			em.UsageLimits = appendEffective(em.UsageLimits, declared.UsageLimits, g.Name, seenUsage, cascading)
		}
		out = append(out, em)
	}
	slices.SortFunc(out, func(a, b gatewayv1.EffectiveModel) int { return strings.Compare(a.Slug, b.Slug) })
	return out
}

// SnapshotModels is Resolve in the snapshot's form (api/snapshot): the models and limits gatewayd enforces for
// chain[0]. The manager publishes it; REST compares it with what gatewayd serves to know a write is in force.
func SnapshotModels(chain Chain) []snapshot.Model {
	effective := Resolve(chain)
	models := make([]snapshot.Model, len(effective))
	for i, m := range effective {
		models[i] = snapshot.Model{Slug: m.Slug, RateLimits: snapshotLimits(m.RateLimits), UsageLimits: snapshotLimits(m.UsageLimits)}
	}
	return models
}

func snapshotLimits(in []gatewayv1.EffectiveLimit) []snapshot.Limit {
	if len(in) == 0 {
		return nil
	}
	out := make([]snapshot.Limit, len(in))
	for i, l := range in {
		out[i] = snapshot.Limit{Type: string(l.Type), Unit: string(l.Unit), Threshold: l.Threshold, SourceGroup: l.SourceGroup}
	}
	return out
}

type limitKey struct {
	typ  gatewayv1.LimitType
	unit gatewayv1.LimitUnit
}

func appendEffective(dst []gatewayv1.EffectiveLimit, declared []gatewayv1.Limit, source string, seen map[limitKey]bool, cascading bool) []gatewayv1.EffectiveLimit {
	sorted := slices.Clone(declared)
	slices.SortFunc(sorted, func(a, b gatewayv1.Limit) int {
		return strings.Compare(string(a.Type)+"/"+string(a.Unit), string(b.Type)+"/"+string(b.Unit))
	})
	for _, l := range sorted {
		k := limitKey{l.Type, l.Unit}
		if !cascading && seen[k] {
			continue
		}
		seen[k] = true
		dst = append(dst, gatewayv1.EffectiveLimit{Limit: l, SourceGroup: source})
	}
	return dst
}

func modelOf(g *gatewayv1.Group, slug string) *gatewayv1.ModelConfig {
	for i := range g.Spec.Models {
		if g.Spec.Models[i].Slug == slug {
			return &g.Spec.Models[i]
		}
	}
	return nil
}

// String renders a chain as "self <- parent <- root" for messages.
func (c Chain) String() string {
	ids := make([]string, len(c))
	for i, g := range c {
		ids[i] = g.Name
	}
	return strings.Join(ids, " <- ")
}

var _ fmt.Stringer = Chain(nil)

// FetchAncestors reads g's ancestors, nearest first, through get, for callers that hold no index of the
// workspace: at most MaxDepth of them, which is enough for Chain to tell a chain that is too deep. It stops at a
// root, at a parent that get reports absent (nil, nil), and at a group already seen, so a cycle ends it.
func FetchAncestors(g *gatewayv1.Group, get func(id string) (*gatewayv1.Group, error)) ([]*gatewayv1.Group, error) {
	seen := map[string]bool{g.Name: true}
	var out []*gatewayv1.Group
	for pid := g.ParentID(); pid != "" && !seen[pid] && len(out) < gatewayv1.MaxDepth; {
		seen[pid] = true
		parent, err := get(pid)
		if err != nil {
			return nil, fmt.Errorf("failed to read ancestor %s of group %s: %w", pid, g.Name, err)
		}
		if parent == nil {
			break
		}
		out = append(out, parent)
		pid = parent.ParentID()
	}
	return out, nil
}

// MeteringGroup is the group whose counter a limit charges, for a call of group: the group itself in INDEPENDENT
// mode (each group meters its own usage against the closest declared threshold), and the declaring group source
// in CASCADING mode (descendants share an ancestor's pool). The data plane binds its limit plans with it, and the
// usage report reads the same counters.
func MeteringGroup(mode gatewayv1.LimitEnforcement, group, source string) string {
	if mode == gatewayv1.EnforcementCascading && source != "" {
		return source
	}
	return group
}
