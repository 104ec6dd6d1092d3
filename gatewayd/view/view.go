// Package view is gatewayd's immutable, precomputed runtime form of the loaded snapshots: keys indexed by
// prefix, groups with a bound limit plan per slug, endpoints by slug, workspace keys by prefix. A View is
// built off the hot path when a snapshot loads and is then only read, so request handling needs no lock:
// the loader swaps a whole new View in through an atomic pointer.
package view

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
	"github.com/modelgate/modelgate/api/v1alpha1/pricing"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/tryplan"
)

// PrefixLen is the length of the lookup prefix of every key: its first 16 characters.
const PrefixLen = 16

// View is every loaded namespace, with indexes across them. The zero of a View is not usable; use Empty.
type View struct {
	namespaces map[string]*Namespace
	// slots are the namespaces in the order they were first loaded; the key index names them by position.
	slots []*Namespace
	// keys and workspaceKeys find the candidates of a prefix: a prefix is unique per namespace only.
	keys          *keyIndex
	workspaceKeys map[string][]*WorkspaceKey
}

// Namespace is one workspace's snapshot, resolved.
type Namespace struct {
	Name     string
	Version  int64
	Checksum string
	// Groups by ID.
	Groups map[string]*Group
	// Endpoints by slug.
	Endpoints map[string]*Endpoint
	// Models and Deployments of the model platform, by ID. Read only.
	Models      map[string]*snapshot.ServedModel
	Deployments map[string]*snapshot.Deployment
	// Snapshot is the decoded snapshot this view was built from, without its APIKeys: a million federated keys
	// are held once, compactly, in the key index (HasKey tells whether one is served). The management API reads
	// it to answer with full records and to tell when a write has reached this replica. Read only.
	Snapshot *snapshot.Snapshot
	// keyBlocks hold the federated keys by value, one block per content-addressed part (or per run of
	// maxBlockKeys keys of a snapshot loaded whole); keyParts finds a part's block by its hash, so a load reuses
	// the blocks of the parts that did not change without decoding them.
	keyBlocks []*keyBlock
	keyParts  map[string]*keyBlock
	// keyEpoch is the same for two builds of a namespace whose keys sit at the same positions, so the
	// cross-namespace key index of the view being served still applies.
	keyEpoch      uint64
	workspaceKeys []*WorkspaceKey
	// tier holds, by prefix, the bound model-API tier plan of each workspace key; empty when the Workspace sets
	// no modelAPILimits.
	tier map[string]*limits.Plan
}

// Group is a group with its allowed slugs.
type Group struct {
	ID               string
	Namespace        string
	ExternalEntityID string
	Mode             string
	// Models by slug: exactly the slugs the group's keys may call.
	Models map[string]*Model
}

// Model is an allowed slug of a group with its bound limit plan.
type Model struct {
	Slug string
	Plan *limits.Plan
}

// Key is a federated key.
type Key struct {
	ID     string
	Prefix string
	Hash   [sha256.Size]byte
	Group  *Group
	// Shared holds, by slug, the plan of a call to a shared model API Endpoint: the group's plan followed by this
	// key's model-API tier limits, bound as one plan so one Admit charges both or neither. Only slugs of the
	// group whose Endpoint is marked sharedModelAPI appear, and only when the Workspace sets modelAPILimits.
	Shared map[string]*limits.Plan
}

// PlanFor is the plan a call of k to model m is held to: the group's, with k's tier limits when m's Endpoint is
// a shared model API.
func (k *Key) PlanFor(m *Model) *limits.Plan {
	if p := k.Shared[m.Slug]; p != nil {
		return p
	}
	return m.Plan
}

// WorkspaceKey is a workspace key.
type WorkspaceKey struct {
	ID        string
	Namespace string
	Prefix    string
	Hash      [sha256.Size]byte
	// Record is the key's snapshot record: type, owner, team and scopes. Read only.
	Record *snapshot.WorkspaceAPIKey
}

// Endpoint routes a slug to its upstream.
type Endpoint struct {
	ID   string
	Slug string
	// Targets are the Endpoint's upstreams, in the spec's order; Plan is what gatewayd/tryplan reads of them.
	Targets []Target
	Plan    []tryplan.Target
	// Policy is the retry and cooldown policy, defaults resolved.
	Policy tryplan.Policy
	// Timeout bounds one try; zero when the Endpoint leaves it to gatewayd's default.
	Timeout time.Duration
	// SharedModelAPI holds federated keys calling the slug to the workspace's model-API tier as well.
	SharedModelAPI bool
}

// Target is one upstream of an Endpoint.
type Target struct {
	// Name is unique in its Endpoint.
	Name     string
	Provider string
	// BaseURL has no trailing slash.
	BaseURL     string
	TargetModel string
	// Secret holds the upstream's key, nil when the upstream needs none.
	Secret     *snapshot.SecretRef
	APIVersion string
	Region     string
	// Price is the target's pricing, parsed once here: a call's cost is the price of the target that answered
	// it, in the view the call was routed with (docs/decisions.md "Prices and cost"). Zero when unpriced.
	Price pricing.Pricing
	// Key names the target across views (namespace, Endpoint id and target name): gatewayd/cooldown keeps its
	// state under it, so a snapshot reload keeps a target's cooldown.
	Key string
}

// Empty returns a View with no namespace.
func Empty() *View {
	return &View{namespaces: map[string]*Namespace{}, keys: newKeyIndex(nil), workspaceKeys: map[string][]*WorkspaceKey{}}
}

// Namespace returns the loaded namespace, nil when none is.
func (v *View) Namespace(name string) *Namespace { return v.namespaces[name] }

// TierPlan is the bound model-API tier plan of the workspace key of prefix: the Workspace's modelAPILimits for
// that key as a whole. It is nil when the Workspace sets none.
func (ns *Namespace) TierPlan(prefix string) *limits.Plan { return ns.tier[prefix] }

// Namespaces returns the names of the loaded namespaces.
func (v *View) Namespaces() []string { return slices.Sorted(maps.Keys(v.namespaces)) }

// With returns a new View in which ns replaces the namespace of the same name. The federated key index is
// kept when ns's keys sit where the replaced namespace's did (a change that touched no key), and rebuilt
// otherwise, which costs one pass over the keys of every namespace; the workspace key index is rebuilt. Both
// happen only on a snapshot load.
func (v *View) With(ns *Namespace) *View {
	next := &View{namespaces: maps.Clone(v.namespaces), slots: slices.Clone(v.slots), keys: v.keys}
	next.namespaces[ns.Name] = ns
	if i := slices.IndexFunc(next.slots, func(n *Namespace) bool { return n.Name == ns.Name }); i >= 0 {
		if next.slots[i].keyEpoch != ns.keyEpoch {
			next.keys = nil
		}
		next.slots[i] = ns
	} else {
		next.slots = append(next.slots, ns)
		if len(ns.keyBlocks) > 0 {
			next.keys = nil
		}
	}
	if next.keys == nil {
		next.keys = newKeyIndex(next.slots)
	}
	next.workspaceKeys = make(map[string][]*WorkspaceKey, len(v.workspaceKeys)+len(ns.workspaceKeys))
	for _, n := range next.slots {
		for _, k := range n.workspaceKeys {
			next.workspaceKeys[k.Prefix] = append(next.workspaceKeys[k.Prefix], k)
		}
	}
	return next
}

// hashKey hashes a presented key without a heap allocation for keys of up to 128 bytes.
func hashKey(key string) [sha256.Size]byte {
	var buf [128]byte
	return sha256.Sum256(append(buf[:0], key...))
}

// LookupKey returns the federated key whose hash matches key, nil when none does. Every candidate of the
// prefix is compared in constant time, so timing tells nothing about which one, if any, matched.
func (v *View) LookupKey(key string) *Key {
	if len(key) < PrefixLen {
		return nil
	}
	prefix := key[:PrefixLen]
	ix := v.keys
	h := ix.hash(prefix)
	var sum [sha256.Size]byte
	hashed := false
	var found *Key
	for i := h & ix.mask; ; i = (i + 1) & ix.mask {
		e := &ix.entries[i]
		if e.slot == 0 {
			return found
		}
		if e.tag != uint32(h>>32) {
			continue
		}
		c := v.slots[e.slot-1].keyAt(e.pos)
		if c.Prefix != prefix {
			continue
		}
		if !hashed {
			sum, hashed = hashKey(key), true
		}
		if subtle.ConstantTimeCompare(sum[:], c.Hash[:]) == 1 {
			found = c
		}
	}
}

// HasKey reports whether namespace serves a federated key of prefix: what a write of a key waits for.
func (v *View) HasKey(namespace, prefix string) bool {
	ix := v.keys
	h := ix.hash(prefix)
	for i := h & ix.mask; ; i = (i + 1) & ix.mask {
		e := &ix.entries[i]
		if e.slot == 0 {
			return false
		}
		if e.tag == uint32(h>>32) && v.slots[e.slot-1].Name == namespace && v.slots[e.slot-1].keyAt(e.pos).Prefix == prefix {
			return true
		}
	}
}

// LookupWorkspaceKey is LookupKey for workspace keys.
func (v *View) LookupWorkspaceKey(key string) *WorkspaceKey {
	if len(key) < PrefixLen {
		return nil
	}
	cands := v.workspaceKeys[key[:PrefixLen]]
	if len(cands) == 0 {
		return nil
	}
	sum := hashKey(key)
	var found *WorkspaceKey
	for _, c := range cands {
		if subtle.ConstantTimeCompare(sum[:], c.Hash[:]) == 1 {
			found = c
		}
	}
	return found
}

// Build resolves one decoded snapshot and binds its limit plans to store. It refuses a snapshot that is
// internally inconsistent, since serving half of it could let a revoked key or a lifted limit through.
//
// prev is the view of the namespace being served, or nil. A group whose snapshot record is unchanged keeps its
// resolved Group and bound plans from prev: a change to one group of ten thousand then costs one plan, not ten
// thousand, on the way from the ConfigMap watch to serving.
func Build(s *snapshot.Snapshot, version int64, checksum string, store limits.Store, prev *Namespace) (*Namespace, error) {
	head := *s
	head.APIKeys = nil
	return BuildParts(&head, wholeKeyParts(s.APIKeys), version, checksum, store, prev)
}

// BuildParts is Build of a snapshot whose federated keys come by part: s carries everything else (its APIKeys
// are ignored), keys the parts' keys in order. A part of prev (HasKeyPart) may come without its keys: its block
// is reused, rebound to the groups of the new view when one of them changed, so a change decodes and resolves
// only the parts it rewrote.
func BuildParts(s *snapshot.Snapshot, keys []KeyPart, version int64, checksum string, store limits.Store, prev *Namespace) (*Namespace, error) {
	head := *s
	head.APIKeys = nil
	s = &head
	ns := &Namespace{
		Name:      s.Namespace,
		Version:   version,
		Checksum:  checksum,
		Groups:    make(map[string]*Group, len(s.Groups)),
		Endpoints: make(map[string]*Endpoint, len(s.Endpoints)),
		Snapshot:  s,
	}
	if err := ns.indexModels(s); err != nil {
		return nil, err
	}
	// depth is built only when a group has to be planned: a load after a small change plans few.
	var depth map[string]int
	// The record of a group in prev is found by position first: unchanged parts keep their groups where they
	// were, so a change to a hundred thousand groups builds no map of them unless one was added or removed.
	var prevGroups []snapshot.Group
	if prev != nil && prev.Snapshot != nil {
		prevGroups = prev.Snapshot.Groups
	}
	var before map[string]*snapshot.Group
	oldOf := func(i int, id string) *snapshot.Group {
		if i < len(prevGroups) && prevGroups[i].ID == id {
			return &prevGroups[i]
		}
		if before == nil {
			before = make(map[string]*snapshot.Group, len(prevGroups))
			for j := range prevGroups {
				before[prevGroups[j].ID] = &prevGroups[j]
			}
		}
		return before[id]
	}
	// moved are the groups of prev that ns does not serve as they were: rebuilt or gone.
	var moved map[*Group]bool
	move := func(g *Group) {
		if moved == nil {
			moved = map[*Group]bool{}
		}
		moved[g] = true
	}
	kept := 0
	for i, g := range s.Groups {
		old := oldOf(i, g.ID)
		var was *Group
		if old != nil {
			was = prev.Groups[g.ID]
		}
		if was != nil {
			kept++
			if old.Equal(&g) {
				ns.Groups[g.ID] = was
				continue
			}
			move(was)
		}
		if depth == nil {
			depth = make(map[string]int, len(s.Groups))
			for _, g := range s.Groups {
				depth[g.ID] = g.Depth
			}
		}
		grp := &Group{ID: g.ID, Namespace: s.Namespace, ExternalEntityID: g.ExternalEntityID, Mode: g.Mode,
			Models: make(map[string]*Model, len(g.Models))}
		for _, m := range g.Models {
			plan, err := planFor(s.Namespace, g, m, depth)
			if err != nil {
				return nil, err
			}
			if err := store.Bind(plan); err != nil {
				return nil, fmt.Errorf("failed to bind limits of group %s slug %s: %w", g.ID, m.Slug, err)
			}
			grp.Models[m.Slug] = &Model{Slug: m.Slug, Plan: plan}
		}
		ns.Groups[g.ID] = grp
	}
	if prev != nil && (kept < len(prev.Groups) || len(ns.Groups) != len(s.Groups)) {
		for id, g := range prev.Groups {
			if ns.Groups[id] != g {
				move(g)
			}
		}
	}
	if err := ns.indexKeys(keys, prev, moved); err != nil {
		return nil, err
	}
	tier := tierOf(s)
	// Bound tier plans of the view being served stay valid while the tier is the same: they name the same buckets.
	var prevTier map[string]*limits.Plan
	if prev != nil && prev.Snapshot != nil && slices.Equal(tierOf(prev.Snapshot), tier) {
		prevTier = prev.tier
	}
	for i := range s.WorkspaceAPIKeys {
		k := &s.WorkspaceAPIKeys[i]
		hash, err := parseKey(k.Prefix, k.Hash)
		if err != nil {
			return nil, fmt.Errorf("workspaceAPIKeys[%s]: %w", k.ID, err)
		}
		ns.workspaceKeys = append(ns.workspaceKeys, &WorkspaceKey{ID: k.ID, Namespace: s.Namespace, Prefix: k.Prefix,
			Hash: hash, Record: k})
		if tier != nil {
			plan := prevTier[k.Prefix]
			if plan == nil {
				plan = &limits.Plan{Limits: limits.Tier(s.Namespace, k.Prefix, tier[0], tier[1])}
				if err := store.Bind(plan); err != nil {
					return nil, fmt.Errorf("failed to bind the model-API tier of workspace key %s: %w", k.ID, err)
				}
			}
			if ns.tier == nil {
				ns.tier = make(map[string]*limits.Plan, len(s.WorkspaceAPIKeys))
			}
			ns.tier[k.Prefix] = plan
		}
	}
	for i := range s.Endpoints {
		ep, err := newEndpoint(s.Namespace, &s.Endpoints[i])
		if err != nil {
			return nil, err
		}
		ns.Endpoints[ep.Slug] = ep
	}
	if err := ns.bindShared(s, store, prev); err != nil {
		return nil, err
	}
	return ns, nil
}

// indexKeys builds the key blocks of ns from keys: a part of prev without its keys reuses prev's block, rebound
// when one of its keys' groups is in moved (groups of prev rebuilt or gone); any other part is resolved from its
// decoded keys.
func (ns *Namespace) indexKeys(keys []KeyPart, prev *Namespace, moved map[*Group]bool) error {
	// Blocks are resolved in parallel (a start resolves a million keys); errors are reported in part order, so
	// the first inconsistency named is always the same.
	ns.keyBlocks = make([]*keyBlock, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	work := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(keys)) {
		wg.Go(func() {
			for i := range work {
				p := keys[i]
				if p.Keys == nil && p.compact == nil && p.Hash != "" {
					old := prev.keyPart(p.Hash)
					if old == nil {
						errs[i] = fmt.Errorf("part %s comes without its keys, and the view being served does not hold them", p.Hash)
						continue
					}
					ns.keyBlocks[i], errs[i] = rebound(ns, old, moved)
				} else {
					ns.keyBlocks[i], errs[i] = newKeyBlock(ns, p)
				}
			}
		})
	}
	for i := range keys {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for _, b := range ns.keyBlocks {
		if b.hash != "" {
			if ns.keyParts == nil {
				ns.keyParts = make(map[string]*keyBlock, len(keys))
			}
			ns.keyParts[b.hash] = b
		}
	}
	if len(ns.keyBlocks) >= 1<<16 {
		return fmt.Errorf("%d key parts, more than %d", len(ns.keyBlocks), 1<<16-1)
	}
	if prev != nil && sameKeyPositions(ns.keyBlocks, prev.keyBlocks) {
		ns.keyEpoch = prev.keyEpoch
	} else {
		ns.keyEpoch = keyEpochs.Add(1)
	}
	return nil
}

// keyEpochs numbers the key layouts of all namespaces.
var keyEpochs atomic.Uint64

// keyPart is prev's block of the part named hash, nil when prev is nil or has none.
func (ns *Namespace) keyPart(hash string) *keyBlock {
	if ns == nil {
		return nil
	}
	return ns.keyParts[hash]
}

// sameShared is true when every slug of g is a shared model API in ns exactly when it was in prev.
func sameShared(ns, prev *Namespace, g *Group) bool {
	for slug := range g.Models {
		if isShared(ns, slug) != isShared(prev, slug) {
			return false
		}
	}
	return true
}

func isShared(ns *Namespace, slug string) bool {
	e := ns.Endpoints[slug]
	return e != nil && e.SharedModelAPI
}

// tierOf is the Workspace's model-API tier as {requests, tokens} per minute, nil when it sets none.
func tierOf(s *snapshot.Snapshot) []int64 {
	l := s.Workspace.ModelAPILimits
	if l == nil || (l.RequestsPerMinute <= 0 && l.TokensPerMinute <= 0) {
		return nil
	}
	return []int64{l.RequestsPerMinute, l.TokensPerMinute}
}

// bindShared gives each federated key, for each slug of its group served by a shared model API Endpoint, a plan
// of the group's limits followed by the key's tier limits. Group limits come first, so when both are exhausted
// the 429 names the group's, as it did before the Endpoint was shared.
//
// A key keeps the plans it has (a block reused from prev, whose group was not rebuilt) when the tier and the
// shared slugs are those of prev, and a key of a new block keeps the plans of the key of the same ID in prev when
// its group and prefix are the same and its slugs are shared as they were. A load after a small change then
// binds few plans, not one per key.
func (ns *Namespace) bindShared(s *snapshot.Snapshot, store limits.Store, prev *Namespace) error {
	tier := tierOf(s)
	if tier == nil {
		// Keys of prev's blocks may still carry the plans of a tier that is gone.
		for bi, b := range ns.keyBlocks {
			if !slices.ContainsFunc(b.keys, func(k Key) bool { return k.Shared != nil }) {
				continue
			}
			b = &keyBlock{hash: b.hash, keys: slices.Clone(b.keys)}
			for i := range b.keys {
				b.keys[i].Shared = nil
			}
			ns.keyBlocks[bi] = b
			if b.hash != "" {
				ns.keyParts[b.hash] = b
			}
		}
		return nil
	}
	same := sameSharedState(ns, prev, s)
	var before map[string]*Key
	for bi, b := range ns.keyBlocks {
		reused := same && prev.keyPart(b.hash) == b
		if reused {
			continue
		}
		if before == nil && prev != nil && prev.Snapshot != nil && equalTier(tierOf(prev.Snapshot), tier) {
			before = map[string]*Key{}
			prev.eachKey(func(k *Key) { before[k.ID] = k })
		}
		if prev.keyPart(b.hash) == b {
			// The block is prev's, whose plans no longer apply: bind into a copy.
			b = &keyBlock{hash: b.hash, keys: slices.Clone(b.keys)}
			ns.keyBlocks[bi] = b
			if b.hash != "" {
				ns.keyParts[b.hash] = b
			}
		}
		for i := range b.keys {
			k := &b.keys[i]
			if old := before[k.ID]; old != nil && old.Group == k.Group && old.Prefix == k.Prefix && sameShared(ns, prev, k.Group) {
				k.Shared = old.Shared
				continue
			}
			k.Shared = nil
			for slug, m := range k.Group.Models {
				if !isShared(ns, slug) {
					continue
				}
				plan := &limits.Plan{Limits: slices.Concat(m.Plan.Limits, limits.Tier(s.Namespace, k.Prefix, tier[0], tier[1]))}
				if err := store.Bind(plan); err != nil {
					return fmt.Errorf("failed to bind the shared model API plan of key %s slug %s: %w", k.ID, slug, err)
				}
				if k.Shared == nil {
					k.Shared = map[string]*limits.Plan{}
				}
				k.Shared[slug] = plan
			}
		}
	}
	return nil
}

// parseKey checks a key's prefix and decodes its hex hash.
func parseKey(prefix, hash string) ([sha256.Size]byte, error) {
	var out [sha256.Size]byte
	err := parseKeyInto(&out, prefix, hash)
	return out, err
}

// parseKeyInto checks a key's prefix and decodes its hex hash into out.
func parseKeyInto[T string | []byte](out *[sha256.Size]byte, prefix, hash T) error {
	if len(prefix) != PrefixLen {
		return fmt.Errorf("prefix: must be %d characters, got %d", PrefixLen, len(prefix))
	}
	if len(hash) == 2*sha256.Size {
		if _, err := hex.Decode(out[:], []byte(hash)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("hash: must be %d lowercase hex characters", 2*sha256.Size)
}

// planFor turns the effective limits of one (group, slug) into a plan. The metering group is the caller's own
// in INDEPENDENT mode and the declaring group in CASCADING mode (docs/limits.md "Buckets and plans"). Limits
// are ordered nearest declaring group first, so a 429 names the closest limit hit.
func planFor(namespace string, g snapshot.Group, m snapshot.Model, depth map[string]int) (*limits.Plan, error) {
	all := slices.Concat(m.RateLimits, m.UsageLimits)
	plan := &limits.Plan{Limits: make([]limits.Limit, 0, len(all))}
	for i, l := range all {
		t, err := limits.ParseType(l.Type)
		if err != nil {
			return nil, fmt.Errorf("groups[%s].models[%s] limit %d: %w", g.ID, m.Slug, i, err)
		}
		u, err := limits.ParseUnit(l.Unit)
		if err != nil {
			return nil, fmt.Errorf("groups[%s].models[%s] limit %d: %w", g.ID, m.Slug, i, err)
		}
		if l.Threshold < 0 {
			return nil, fmt.Errorf("groups[%s].models[%s] limit %d: threshold must not be negative", g.ID, m.Slug, i)
		}
		source := cmp.Or(l.SourceGroup, g.ID)
		metered := hierarchy.MeteringGroup(gatewayv1.LimitEnforcement(g.Mode), g.ID, source)
		plan.Limits = append(plan.Limits, limits.Limit{
			Key:       limits.BucketKey{Namespace: namespace, Group: metered, Slug: m.Slug, Type: t, Unit: u},
			Threshold: l.Threshold, SourceGroup: source,
		})
	}
	slices.SortStableFunc(plan.Limits, func(a, b limits.Limit) int {
		return cmp.Compare(depthOf(depth, b.SourceGroup, g), depthOf(depth, a.SourceGroup, g))
	})
	return plan, nil
}

func depthOf(depth map[string]int, id string, self snapshot.Group) int {
	if id == self.ID {
		return self.Depth
	}
	return depth[id]
}

// indexModels indexes the models and deployments of s, refusing a deployment gatewayd could not reach.
func (ns *Namespace) indexModels(s *snapshot.Snapshot) error {
	ns.Models = make(map[string]*snapshot.ServedModel, len(s.Models))
	for i := range s.Models {
		ns.Models[s.Models[i].ID] = &s.Models[i]
	}
	ns.Deployments = make(map[string]*snapshot.Deployment, len(s.Deployments))
	for i := range s.Deployments {
		d := &s.Deployments[i]
		switch d.Kind {
		case snapshot.DeploymentURL:
			if u, err := url.Parse(d.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("deployments[%s].url: %q is not an absolute http(s) URL", d.ID, d.URL)
			}
		case snapshot.DeploymentService:
			if d.Service == "" {
				return fmt.Errorf("deployments[%s].service: must not be empty", d.ID)
			}
		default:
			return fmt.Errorf("deployments[%s].kind: %q is neither %q nor %q", d.ID, d.Kind, snapshot.DeploymentURL, snapshot.DeploymentService)
		}
		ns.Deployments[d.ID] = d
	}
	return nil
}

// newEndpoint is the served form of e in namespace.
func newEndpoint(namespace string, e *snapshot.Endpoint) (*Endpoint, error) {
	if len(e.Targets) == 0 {
		return nil, fmt.Errorf("endpoints[%s].targets: must not be empty", e.ID)
	}
	if len(e.Targets) > tryplan.MaxTargets {
		return nil, fmt.Errorf("endpoints[%s].targets: %d targets, at most %d", e.ID, len(e.Targets), tryplan.MaxTargets)
	}
	ep := &Endpoint{ID: e.ID, Slug: e.Slug, Targets: make([]Target, len(e.Targets)), Plan: make([]tryplan.Target, len(e.Targets)),
		Timeout: time.Duration(e.TimeoutMillis) * time.Millisecond, SharedModelAPI: e.SharedModelAPI}
	for i, t := range e.Targets {
		u, err := url.Parse(t.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("endpoints[%s].targets[%d].baseURL: %q is not an absolute http(s) URL", e.ID, i, t.BaseURL)
		}
		name := t.Name
		if name == "" {
			name = "target-" + strconv.Itoa(i)
		}
		var price pricing.Pricing
		if p := t.Pricing; p != nil {
			if price, err = pricing.ParsePricing(p.InputPerMillionTokens, p.OutputPerMillionTokens); err != nil {
				return nil, fmt.Errorf("endpoints[%s].targets[%d].pricing.%w", e.ID, i, err)
			}
		}
		ep.Targets[i] = Target{Name: name, Provider: t.Provider, BaseURL: strings.TrimRight(t.BaseURL, "/"), TargetModel: t.TargetModel,
			Secret: t.APIKeySecret, APIVersion: t.APIVersion, Region: t.Region, Price: price,
			Key: namespace + "/" + e.ID + "/" + name}
		ep.Plan[i] = tryplan.Target{Weight: max(int(t.Weight), 1), Priority: int(t.Priority)}
	}
	var attempts *int32
	var onStatus []int32
	if r := e.Retry; r != nil {
		attempts, onStatus = r.Attempts, r.OnStatus
	}
	var failures int32
	var cooldown time.Duration
	if c := e.Cooldown; c != nil {
		failures, cooldown = c.Failures, time.Duration(c.DurationMillis)*time.Millisecond
	}
	ep.Policy = tryplan.NewPolicy(len(e.Targets), attempts, onStatus, failures, cooldown)
	return ep, nil
}
