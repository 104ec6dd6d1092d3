package translate

import (
	"math"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
)

// Translator is Translate with a memory of its last pass over one workspace. A pass finds the groups and keys
// that changed since the last one (by resourceVersion, or for groups by UID, generation and deletion, since
// only their spec and lifecycle are read), re-judges only the groups whose verdict can depend on them and
// re-checks only the keys whose verdict can, and splices the results into the sorted lists of the last pass.
// Everything else of the snapshot (the workspace, workspace keys, endpoints, models, deployments, teams, chains)
// is small and translated whole every pass.
//
// What a group's record depends on, and so what a change re-judges:
//   - its own spec and deletion, and those of every ancestor (the chain, the root's mode, the effective
//     limits, the ancestors' own checks, being below a group being deleted): a change re-judges the group and
//     all of its descendants, including those of a missing parent that now appears;
//   - which live group holds its externalEntityID and each ancestor's (the oldest): a change of a group's id,
//     or of whether it is live, re-judges every group holding the old or new id, with their descendants.
//
// A key depends on itself, on whether its group is served, and on which key holds its prefix (the oldest of
// either kind): a change re-checks the key, the keys of a group whose verdict flipped, and every key claiming a
// prefix that a changed key held or now claims.
//
// The output equals Translate's for the same input (TestTranslatorMatchesTranslate applies random changes and
// compares after each). An object without a resourceVersion counts as changed on every pass. A Translator serves
// one workspace; given another namespace it starts over. Passes must not run at once.
type Translator struct {
	ns string
	// pass numbers the passes; entries stamp the last pass that saw them, and keys the last that checked them.
	pass uint32
	// groups by name, with the indexes the dependencies above need.
	groups map[string]*groupEntry
	// children maps a parent id, existing or not, to the groups that name it (roots are not listed under "").
	children map[string][]*groupEntry
	// byExternal maps an externalEntityID to every group that declares it; externalOwner to the live one that
	// holds it (the shared map of Groups.externalOwner).
	byExternal    map[string][]*groupEntry
	externalOwner map[string]string
	// keys and wkeys are the APIKeys and WorkspaceAPIKeys by name; claims maps a prefix to the keys (of both
	// kinds) that claim it, chained through keyEntry.nextClaim; keysByGroup the APIKeys by spec.groupID.
	keys, wkeys map[string]*keyEntry
	claims      map[string]*keyEntry
	keysByGroup map[string][]*keyEntry
	// outGroups and outKeys are the last pass's sorted lists. A pass builds new ones (the caller may hold the
	// old) and EncodeParts tells them by their first element.
	outGroups []snapshot.Group
	outKeys   []snapshot.APIKey

	// parts is EncodeParts' memory, nil until it runs.
	parts *partsMemory

	// Judged and Checked count the groups and keys the last pass judged and checked again; PartsEncoded and
	// PartsReused the ranges the last EncodeParts encoded and reused.
	Judged, Checked           int
	PartsEncoded, PartsReused int
}

type groupEntry struct {
	// obj is the group of the current pass (nil between passes, so the caller's list is not kept alive).
	obj *gatewayv1.Group
	version
	parent, external string
	// childPos is the group's place in children[parent].
	childPos int32
	// deleting: the group or an ancestor is being deleted.
	deleting bool
	served   bool
	seen     uint32
}

// version is what tells that an object changed: for a group, its UID, generation and whether it is being
// deleted (Translate reads nothing of a group that can change without them); otherwise its resourceVersion.
type version struct {
	uid      types.UID
	gen      int64
	deleting bool
	rv       string
}

func groupVersion(g *gatewayv1.Group) version {
	if g.UID != "" && g.Generation > 0 {
		return version{uid: g.UID, gen: g.Generation, deleting: g.DeletionTimestamp != nil}
	}
	return version{rv: g.ResourceVersion}
}

// same reports whether v and o name the same content. Without a UID and generation or a resourceVersion
// nothing is known, so the object counts as changed.
func (v version) same(o version) bool {
	if v.uid != "" {
		return v == o
	}
	return v.rv != "" && v == o
}

type keyEntry struct {
	rv      string
	created metav1.Time
	// rec is what an APIKey is served as (for a WorkspaceAPIKey, only its name and prefix); pos places it in
	// keysByGroup.
	rec       snapshot.APIKey
	nextClaim *keyEntry
	pos       int32
	// workspace marks a WorkspaceAPIKey; claiming a key whose credentials are known and that is not being
	// deleted, so that it claims rec.Prefix; served an APIKey in the last pass's list.
	workspace, claiming, served bool
	seen, checked               uint32
}

func (k *keyEntry) ref() KeyRef {
	kind := KindAPIKey
	if k.workspace {
		kind = KindWorkspaceAPIKey
	}
	return KeyRef{Kind: kind, Name: k.rec.ID, Created: k.created}
}

// Translate returns the snapshot of in, equal to Translate(in). Its Groups and APIKeys are the Translator's
// memory, shared with the next pass (which builds new lists, never changing these): they must not be modified.
func (t *Translator) Translate(in Input) *snapshot.Snapshot {
	if t.groups == nil || t.ns != in.Namespace || t.pass == math.MaxUint32 {
		*t = Translator{ns: in.Namespace, groups: map[string]*groupEntry{}, children: map[string][]*groupEntry{},
			byExternal: map[string][]*groupEntry{}, externalOwner: map[string]string{}, keys: map[string]*keyEntry{},
			wkeys: map[string]*keyEntry{}, claims: map[string]*keyEntry{}, keysByGroup: map[string][]*keyEntry{},
			outGroups: []snapshot.Group{}, outKeys: []snapshot.APIKey{}}
		// The first pass sees everything new: size the maps once.
		t.groups = make(map[string]*groupEntry, len(in.Groups))
		t.keys = make(map[string]*keyEntry, len(in.APIKeys))
		t.claims = make(map[string]*keyEntry, len(in.APIKeys)+len(in.WorkspaceAPIKeys))
		t.keysByGroup = make(map[string][]*keyEntry, len(in.Groups))
	}
	t.pass++
	// A pass cut short leaves the memory half updated: forget it, so the next pass is a full one.
	defer func() {
		if r := recover(); r != nil {
			*t = Translator{}
			panic(r)
		}
	}()
	s := translateHead(in)

	flipped := t.groupsPass(in.Groups)
	s.Groups = t.outGroups

	touched := map[string]bool{}
	t.diffWorkspaceKeys(in.WorkspaceAPIKeys, touched)
	t.keysPass(in.APIKeys, flipped, touched)
	s.APIKeys = t.outKeys

	s.WorkspaceAPIKeys = translateWorkspaceKeys(in, t.owns)
	return s
}

// owns reports whether the key of that kind and name holds prefix, as Prefixes.Owns.
func (t *Translator) owns(kind, name, prefix string) bool {
	var owner *keyEntry
	for k := t.claims[prefix]; k != nil; k = k.nextClaim {
		if owner == nil || OlderKey(k.ref(), owner.ref()) {
			owner = k
		}
	}
	if owner == nil {
		return false
	}
	o := owner.ref()
	return o.Kind == kind && o.Name == name
}

// groupsPass brings the groups up to date and returns the names of those whose served verdict flipped.
func (t *Translator) groupsPass(groups []gatewayv1.Group) map[string]bool {
	// Changed groups, removed ones included, with the external ids they held before.
	var changed []string
	externals := map[string]bool{}
	for i := range groups {
		g := &groups[i]
		v := groupVersion(g)
		e := t.groups[g.Name]
		switch {
		case e == nil:
			e = &groupEntry{}
			t.groups[g.Name] = e
		case e.version.same(v):
			e.obj, e.seen = g, t.pass
			continue
		default:
			externals[e.external] = true
			t.unindexGroup(e)
		}
		e.obj, e.seen, e.version = g, t.pass, v
		e.parent, e.external = g.ParentID(), g.Spec.ExternalEntityID
		if e.parent != "" {
			e.childPos = int32(len(t.children[e.parent]))
			t.children[e.parent] = append(t.children[e.parent], e)
		}
		t.byExternal[e.external] = append(t.byExternal[e.external], e)
		externals[e.external] = true
		changed = append(changed, g.Name)
	}
	flipped := map[string]bool{}
	var removedServed []string
	if len(t.groups) != len(groups) {
		for name, e := range t.groups {
			if e.seen == t.pass {
				continue
			}
			externals[e.external] = true
			t.unindexGroup(e)
			delete(t.groups, name)
			changed = append(changed, name)
			if e.served {
				flipped[name] = true
				removedServed = append(removedServed, name)
			}
		}
	}

	// The groups below a changed one, whose deletion and chain can have changed.
	dirty := map[string]*groupEntry{}
	t.addSubtrees(changed, dirty)
	memo := map[*groupEntry]bool{}
	for _, e := range dirty {
		e.deleting = t.deletingOf(e, memo)
		externals[e.external] = true
	}
	// The holders of every external id whose holder can have changed, and their subtrees.
	var holders []string
	for id := range externals {
		t.externalOwner[id] = t.holderOf(id)
		if t.externalOwner[id] == "" {
			delete(t.externalOwner, id)
		}
		for _, e := range t.byExternal[id] {
			if _, ok := dirty[e.obj.Name]; !ok {
				holders = append(holders, e.obj.Name)
			}
		}
	}
	t.addSubtrees(holders, dirty)

	judge := t.judge(dirty)
	drop := make(map[string]bool, len(dirty)+len(removedServed))
	for _, name := range removedServed {
		drop[name] = true
	}
	add := make([]snapshot.Group, 0, len(dirty))
	for name, e := range dirty {
		drop[name] = true
		v := judge.Judge(e.obj)
		if v.Ready {
			add = append(add, translateGroup(e.obj, v.Chain))
		}
		if v.Ready != e.served {
			flipped[name] = true
		}
		e.served = v.Ready
	}
	t.Judged = len(dirty)
	slices.SortFunc(add, func(a, b snapshot.Group) int { return strings.Compare(a.ID, b.ID) })
	t.outGroups = splice(t.outGroups, add, drop, func(g *snapshot.Group) string { return g.ID })
	t.touch(true, drop, func(yield func(string) bool) {
		for i := range add {
			if !yield(add[i].ID) {
				return
			}
		}
	})
	for _, e := range t.groups {
		e.obj = nil
	}
	return flipped
}

func (t *Translator) unindexGroup(e *groupEntry) {
	if e.parent != "" {
		// By position: a parent can have very many children.
		list := t.children[e.parent]
		last := list[len(list)-1]
		list[e.childPos], last.childPos = last, e.childPos
		list[len(list)-1] = nil
		if list = list[:len(list)-1]; len(list) == 0 {
			delete(t.children, e.parent)
		} else {
			t.children[e.parent] = list
		}
	}
	// Few groups share an external id: it is unique but for races.
	list := t.byExternal[e.external]
	if i := slices.Index(list, e); i >= 0 {
		list[i] = list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
	}
	if len(list) == 0 {
		delete(t.byExternal, e.external)
	} else {
		t.byExternal[e.external] = list
	}
}

// addSubtrees adds the existing groups among names, and every group below each of them, to dirty.
func (t *Translator) addSubtrees(names []string, dirty map[string]*groupEntry) {
	queue := slices.Clone(names)
	for len(queue) > 0 {
		name := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if e, ok := t.groups[name]; ok {
			if _, seen := dirty[name]; seen {
				continue
			}
			dirty[name] = e
		}
		for _, c := range t.children[name] {
			if _, seen := dirty[c.obj.Name]; !seen {
				queue = append(queue, c.obj.Name)
			}
		}
	}
}

// deletingOf reports whether e or any group above it is being deleted, as NewGroups decides: following parents
// through every group, without a depth limit, a cycle counting as above each of its members.
func (t *Translator) deletingOf(e *groupEntry, memo map[*groupEntry]bool) bool {
	var path []*groupEntry
	on := map[*groupEntry]int{}
	res := false
	for cur := e; cur != nil; {
		if v, ok := memo[cur]; ok {
			res = v
			break
		}
		if i, ok := on[cur]; ok {
			// A cycle: every member is below every other.
			cyc := false
			for _, c := range path[i:] {
				cyc = cyc || c.obj.DeletionTimestamp != nil
			}
			for _, c := range path[i:] {
				memo[c] = cyc
			}
			path, res = path[:i], cyc
			break
		}
		on[cur] = len(path)
		path = append(path, cur)
		cur = t.groups[cur.parent]
	}
	for i := len(path) - 1; i >= 0; i-- {
		res = res || path[i].obj.DeletionTimestamp != nil
		memo[path[i]] = res
	}
	return memo[e]
}

// holderOf is the live group that holds the external id: the oldest, "" when none.
func (t *Translator) holderOf(id string) string {
	var owner *gatewayv1.Group
	for _, e := range t.byExternal[id] {
		if !e.deleting && (owner == nil || Older(e.obj, owner)) {
			owner = e.obj
		}
	}
	if owner == nil {
		return ""
	}
	return owner.Name
}

// judge builds a Groups that judges the dirty groups exactly as NewGroups over every group would: its index
// holds the live groups on their chains (Chain reads nothing else), and the external ids' holders are the
// Translator's.
func (t *Translator) judge(dirty map[string]*groupEntry) *Groups {
	gs := &Groups{deleting: map[string]string{}, externalOwner: t.externalOwner, own: map[string]check{}}
	onChains := map[string]*gatewayv1.Group{}
	for name, e := range dirty {
		if e.deleting {
			// The verdict only says it is being deleted, and the snapshot leaves it out.
			gs.deleting[name] = name
			continue
		}
		cur := e
		for range gatewayv1.MaxDepth + 2 {
			// Not stopping at a group already there: another chain may have reached it near its own end.
			if cur == nil || cur.deleting {
				break
			}
			onChains[cur.obj.Name] = cur.obj
			cur = t.groups[cur.parent]
		}
	}
	live := make([]*gatewayv1.Group, 0, len(onChains))
	for _, g := range onChains {
		live = append(live, g)
	}
	gs.live = hierarchy.NewIndex(live)
	return gs
}

// keysPass brings the APIKeys up to date. flipped are the groups whose verdict flipped; touched the prefixes
// whose claims changed (the workspace keys' already).
func (t *Translator) keysPass(keys []gatewayv1.APIKey, flipped, touched map[string]bool) {
	// check lists the keys to check again, once each (checked stamps them): all of them on a first pass.
	var check []*keyEntry
	if len(t.keys) == 0 {
		check = make([]*keyEntry, 0, len(keys))
	}
	mark := func(e *keyEntry) {
		if e.checked != t.pass {
			e.checked = t.pass
			check = append(check, e)
		}
	}
	// drop holds the prefixes of the last list's keys that go: at most one served key holds a prefix.
	drop := map[string]bool{}
	for i := range keys {
		k := &keys[i]
		e := t.keys[k.Name]
		switch {
		case e == nil:
			e = &keyEntry{}
			t.keys[k.Name] = e
		case e.rv != "" && e.rv == k.ResourceVersion:
			e.seen = t.pass
			continue
		default:
			t.forget(e, touched, drop)
		}
		prefix, hash, ok := KeyCredentials(k.Spec.KeySource, k.Status)
		e.rv, e.seen, e.created = k.ResourceVersion, t.pass, k.CreationTimestamp
		e.rec = snapshot.APIKey{ID: k.Name, Prefix: prefix, Hash: hash, GroupID: k.Spec.GroupID, Name: k.Spec.DisplayName}
		if ok && k.DeletionTimestamp == nil {
			t.claim(e, touched)
		}
		e.pos = int32(len(t.keysByGroup[e.rec.GroupID]))
		t.keysByGroup[e.rec.GroupID] = append(t.keysByGroup[e.rec.GroupID], e)
		mark(e)
	}
	if len(t.keys) != len(keys) {
		for name, e := range t.keys {
			if e.seen != t.pass {
				t.forget(e, touched, drop)
				delete(t.keys, name)
			}
		}
	}
	for id := range flipped {
		for _, e := range t.keysByGroup[id] {
			mark(e)
		}
	}
	for prefix := range touched {
		for e := t.claims[prefix]; e != nil; e = e.nextClaim {
			if !e.workspace {
				mark(e)
			}
		}
	}
	add := make([]snapshot.APIKey, 0, len(check))
	for _, e := range check {
		if e.served {
			drop[e.rec.Prefix] = true
		}
		g := t.groups[e.rec.GroupID]
		e.served = e.claiming && g != nil && g.served && t.owns(KindAPIKey, e.rec.ID, e.rec.Prefix)
		if e.served {
			add = append(add, e.rec)
		}
	}
	t.Checked = len(check)
	slices.SortFunc(add, func(a, b snapshot.APIKey) int { return strings.Compare(a.Prefix, b.Prefix) })
	t.outKeys = splice(t.outKeys, add, drop, func(k *snapshot.APIKey) string { return k.Prefix })
	t.touch(false, drop, func(yield func(string) bool) {
		for i := range add {
			if !yield(add[i].Prefix) {
				return
			}
		}
	})
}

// forget takes an APIKey out of the indexes and the list before it changes or goes.
func (t *Translator) forget(e *keyEntry, touched, drop map[string]bool) {
	if e.served {
		drop[e.rec.Prefix] = true
		e.served = false
	}
	t.unclaim(e, touched)
	list := t.keysByGroup[e.rec.GroupID]
	last := list[len(list)-1]
	list[e.pos], last.pos = last, e.pos
	list[len(list)-1] = nil
	if list = list[:len(list)-1]; len(list) == 0 {
		delete(t.keysByGroup, e.rec.GroupID)
	} else {
		t.keysByGroup[e.rec.GroupID] = list
	}
}

// diffWorkspaceKeys brings the workspace keys' claims up to date; they are translated whole every pass.
func (t *Translator) diffWorkspaceKeys(keys []gatewayv1.WorkspaceAPIKey, touched map[string]bool) {
	for i := range keys {
		k := &keys[i]
		e := t.wkeys[k.Name]
		switch {
		case e == nil:
			e = &keyEntry{workspace: true}
			t.wkeys[k.Name] = e
		case e.rv != "" && e.rv == k.ResourceVersion:
			e.seen = t.pass
			continue
		default:
			t.unclaim(e, touched)
		}
		prefix, _, ok := KeyCredentials(k.Spec.KeySource, k.Status)
		e.rv, e.seen, e.created = k.ResourceVersion, t.pass, k.CreationTimestamp
		e.rec = snapshot.APIKey{ID: k.Name, Prefix: prefix}
		if ok && k.DeletionTimestamp == nil {
			t.claim(e, touched)
		}
	}
	if len(t.wkeys) != len(keys) {
		for name, e := range t.wkeys {
			if e.seen != t.pass {
				t.unclaim(e, touched)
				delete(t.wkeys, name)
			}
		}
	}
}

func (t *Translator) claim(e *keyEntry, touched map[string]bool) {
	e.claiming, e.nextClaim = true, t.claims[e.rec.Prefix]
	t.claims[e.rec.Prefix] = e
	touched[e.rec.Prefix] = true
}

func (t *Translator) unclaim(e *keyEntry, touched map[string]bool) {
	if !e.claiming {
		return
	}
	prefix := e.rec.Prefix
	touched[prefix] = true
	switch head := t.claims[prefix]; {
	case head == e && e.nextClaim == nil:
		delete(t.claims, prefix)
	case head == e:
		t.claims[prefix] = e.nextClaim
	default:
		for p := head; p.nextClaim != nil; p = p.nextClaim {
			if p.nextClaim == e {
				p.nextClaim = e.nextClaim
				break
			}
		}
	}
	e.claiming, e.nextClaim = false, nil
}

// splice returns a new list sorted by key: old (sorted) without the items whose key is in drop, merged with add
// (sorted, and sharing no key with what old keeps). With nothing to drop or add it returns old itself, which
// is never modified in place, so it can be shared.
func splice[T any](old, add []T, drop map[string]bool, key func(*T) string) []T {
	if len(add) == 0 && len(drop) == 0 {
		return old
	}
	out := make([]T, 0, len(old)+len(add))
	j := 0
	for i := range old {
		k := key(&old[i])
		if drop[k] {
			continue
		}
		for j < len(add) && key(&add[j]) < k {
			out = append(out, add[j])
			j++
		}
		out = append(out, old[i])
	}
	return append(out, add[j:]...)
}
