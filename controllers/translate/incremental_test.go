package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// world is a workspace that random changes are applied to, as the API server would store them: every write
// gets a new resourceVersion, a spec write a new generation, a delete and create again a new UID.
type world struct {
	rng *rand.Rand
	in  Input
	rv  int
	// names and prefixes are small pools, so that names come back after a delete and prefixes and external ids
	// collide.
	log []string
}

func newWorld(seed uint64) *world {
	w := &world{rng: rand.New(rand.NewPCG(seed, 0x5eed)), in: Input{Namespace: "ws"}}
	w.in.Workspaces = []gatewayv1.Workspace{{ObjectMeta: w.meta("ws", 0)}}
	for range 25 {
		w.createGroup()
	}
	for range 60 {
		w.createKey()
	}
	for range 4 {
		w.createWorkspaceKey()
	}
	return w
}

func (w *world) nextRV() string {
	w.rv++
	return strconv.Itoa(w.rv)
}

func (w *world) meta(name string, created int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "ws", UID: types.UID(fmt.Sprintf("uid-%s-%d", name, w.rv)), Generation: 1,
		ResourceVersion:   w.nextRV(),
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, created, 0, time.UTC))}
}

func (w *world) pick(n int) int { return w.rng.IntN(n) }

func (w *world) groupName() string { return fmt.Sprintf("g%02d", w.pick(40)) }

// parentOf picks an existing group, a missing one or none.
func (w *world) parentOf() string {
	switch r := w.pick(10); {
	case r < 2 || len(w.in.Groups) == 0:
		return ""
	case r == 2:
		return w.groupName() // maybe missing
	default:
		return w.in.Groups[w.pick(len(w.in.Groups))].Name
	}
}

func (w *world) mode() gatewayv1.LimitEnforcement {
	return []gatewayv1.LimitEnforcement{"", gatewayv1.EnforcementIndependent, gatewayv1.EnforcementCascading}[w.pick(3)]
}

func (w *world) models() []gatewayv1.ModelConfig {
	out := []gatewayv1.ModelConfig{{Slug: "demo/echo",
		RateLimits: []gatewayv1.Limit{{Type: gatewayv1.LimitTypeRequest, Unit: gatewayv1.UnitMinute, Threshold: int64(1 + w.pick(100))}}}}
	if w.pick(2) == 0 {
		out = append(out, gatewayv1.ModelConfig{Slug: "demo/embed",
			UsageLimits: []gatewayv1.Limit{{Type: gatewayv1.LimitTypeToken, Unit: gatewayv1.UnitDay, Threshold: int64(1000 + w.pick(1000))}}})
	}
	return out
}

func (w *world) indexOfGroup(name string) int {
	for i := range w.in.Groups {
		if w.in.Groups[i].Name == name {
			return i
		}
	}
	return -1
}

func (w *world) createGroup() {
	name := w.groupName()
	if w.indexOfGroup(name) >= 0 {
		return
	}
	g := gatewayv1.Group{ObjectMeta: w.meta(name, w.pick(30)), Spec: gatewayv1.GroupSpec{
		ExternalEntityID: fmt.Sprintf("ext-%d", w.pick(30)), DisplayName: name,
		Hierarchy: gatewayv1.Hierarchy{LimitEnforcement: w.mode()}, Models: w.models()}}
	if p := w.parentOf(); p != "" {
		g.Spec.Hierarchy.ParentGroupID = ptr.To(p)
	}
	w.in.Groups = append(w.in.Groups, g)
	w.log = append(w.log, "create group "+name)
}

// updateGroup replaces group i with a copy changed by f; spec says whether f changed the spec.
func (w *world) updateGroup(what string, spec bool, f func(g *gatewayv1.Group)) {
	if len(w.in.Groups) == 0 {
		return
	}
	i := w.pick(len(w.in.Groups))
	g := *w.in.Groups[i].DeepCopy()
	f(&g)
	g.ResourceVersion = w.nextRV()
	if spec {
		g.Generation++
	}
	w.in.Groups[i] = g
	w.log = append(w.log, what+" "+g.Name)
}

func (w *world) deleteGroup() {
	if len(w.in.Groups) == 0 {
		return
	}
	i := w.pick(len(w.in.Groups))
	w.log = append(w.log, "delete group "+w.in.Groups[i].Name)
	w.in.Groups = append(w.in.Groups[:i:i], w.in.Groups[i+1:]...)
}

func (w *world) keyName() string { return fmt.Sprintf("k%03d", w.pick(120)) }

func (w *world) prefix() string { return fmt.Sprintf("mgk_p%03d", w.pick(90)) }

// credentials gives a key a prefix and hash in its spec, in its status, or not yet.
func (w *world) credentials(src *gatewayv1.KeySource, st *gatewayv1.KeyStatus) {
	*src, *st = gatewayv1.KeySource{}, gatewayv1.KeyStatus{}
	switch w.pick(5) {
	case 0:
		src.SecretRef = &gatewayv1.SecretKeySelector{Name: "s"}
	case 1:
		src.SecretRef = &gatewayv1.SecretKeySelector{Name: "s"}
		st.Prefix, st.Hash = w.prefix(), fmt.Sprintf("h%d", w.pick(1000))
	default:
		src.Prefix, src.Hash = w.prefix(), fmt.Sprintf("h%d", w.pick(1000))
	}
}

func (w *world) createKey() {
	name := w.keyName()
	for i := range w.in.APIKeys {
		if w.in.APIKeys[i].Name == name {
			return
		}
	}
	k := gatewayv1.APIKey{ObjectMeta: w.meta(name, w.pick(30)), Spec: gatewayv1.APIKeySpec{GroupID: w.groupName(), DisplayName: name}}
	w.credentials(&k.Spec.KeySource, &k.Status)
	w.in.APIKeys = append(w.in.APIKeys, k)
	w.log = append(w.log, "create key "+name)
}

func (w *world) updateKey(what string, f func(k *gatewayv1.APIKey)) {
	if len(w.in.APIKeys) == 0 {
		return
	}
	i := w.pick(len(w.in.APIKeys))
	k := *w.in.APIKeys[i].DeepCopy()
	f(&k)
	k.ResourceVersion = w.nextRV()
	w.in.APIKeys[i] = k
	w.log = append(w.log, what+" "+k.Name)
}

func (w *world) createWorkspaceKey() {
	name := fmt.Sprintf("w%02d", w.pick(10))
	for i := range w.in.WorkspaceAPIKeys {
		if w.in.WorkspaceAPIKeys[i].Name == name {
			return
		}
	}
	k := gatewayv1.WorkspaceAPIKey{ObjectMeta: w.meta(name, w.pick(30)),
		Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeInvoke, DisplayName: name}}
	w.credentials(&k.Spec.KeySource, &k.Status)
	w.in.WorkspaceAPIKeys = append(w.in.WorkspaceAPIKeys, k)
	w.log = append(w.log, "create workspace key "+name)
}

// step applies one random change.
func (w *world) step() {
	switch w.pick(17) {
	case 0, 1:
		w.createGroup()
	case 2:
		w.deleteGroup()
	case 3:
		w.updateGroup("start deleting", true, func(g *gatewayv1.Group) { g.DeletionTimestamp = ptr.To(metav1.Now()) })
	case 4:
		w.updateGroup("reparent", true, func(g *gatewayv1.Group) {
			g.Spec.Hierarchy.ParentGroupID = nil
			if p := w.parentOf(); p != "" {
				g.Spec.Hierarchy.ParentGroupID = ptr.To(p)
			}
		})
	case 5:
		w.updateGroup("change mode", true, func(g *gatewayv1.Group) { g.Spec.Hierarchy.LimitEnforcement = w.mode() })
	case 6, 7:
		w.updateGroup("change limits", true, func(g *gatewayv1.Group) { g.Spec.Models = w.models() })
	case 8:
		w.updateGroup("change external id", true, func(g *gatewayv1.Group) { g.Spec.ExternalEntityID = fmt.Sprintf("ext-%d", w.pick(30)) })
	case 9:
		// Status writes change neither the spec nor the generation.
		w.updateGroup("write status", false, func(g *gatewayv1.Group) { g.Status.Depth = int32(w.pick(5)) })
	case 10:
		w.createKey()
	case 11:
		if len(w.in.APIKeys) > 0 {
			i := w.pick(len(w.in.APIKeys))
			w.log = append(w.log, "delete key "+w.in.APIKeys[i].Name)
			w.in.APIKeys = append(w.in.APIKeys[:i:i], w.in.APIKeys[i+1:]...)
		}
	case 12:
		w.updateKey("move key", func(k *gatewayv1.APIKey) { k.Spec.GroupID = w.groupName() })
	case 13:
		w.updateKey("change key credentials", func(k *gatewayv1.APIKey) { w.credentials(&k.Spec.KeySource, &k.Status) })
	case 14:
		w.updateKey("start deleting key", func(k *gatewayv1.APIKey) { k.DeletionTimestamp = ptr.To(metav1.Now()) })
	case 15:
		if len(w.in.WorkspaceAPIKeys) > 0 && w.pick(2) == 0 {
			i := w.pick(len(w.in.WorkspaceAPIKeys))
			w.log = append(w.log, "delete workspace key "+w.in.WorkspaceAPIKeys[i].Name)
			w.in.WorkspaceAPIKeys = append(w.in.WorkspaceAPIKeys[:i:i], w.in.WorkspaceAPIKeys[i+1:]...)
		} else {
			w.createWorkspaceKey()
		}
	case 16:
		// The API server lists in any order.
		w.rng.Shuffle(len(w.in.Groups), func(i, j int) { w.in.Groups[i], w.in.Groups[j] = w.in.Groups[j], w.in.Groups[i] })
		w.rng.Shuffle(len(w.in.APIKeys), func(i, j int) { w.in.APIKeys[i], w.in.APIKeys[j] = w.in.APIKeys[j], w.in.APIKeys[i] })
		w.log = append(w.log, "shuffle")
	}
}

// TestTranslatorMatchesTranslate applies seeded random changes (groups and keys created, changed, deleted,
// reparented, moved between modes, external ids and prefixes colliding, status writes, deletions in progress)
// and checks after each that the Translator's snapshot encodes to the very bytes of Translate's.
func TestTranslatorMatchesTranslate(t *testing.T) {
	const seeds, steps = 30, 150
	var judged, full int
	for seed := range uint64(seeds) {
		w := newWorld(seed)
		var tr Translator
		// The parts too, through EncodeParts' memory: some passes are not encoded, and some seeds cut parts small
		// enough to be halved.
		encoding := rand.New(rand.NewPCG(seed, 1))
		maxBytes := snapshot.MaxChunkBytes
		if seed%2 == 1 {
			maxBytes = 1500
		}
		for i := range steps {
			if i > 0 {
				w.step()
			}
			// Encode gzips the JSON of the snapshot, so equal JSON is equal bytes.
			want, got := Translate(w.in), tr.Translate(w.in)
			wantBytes, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			gotBytes, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(wantBytes, gotBytes) {
				t.Fatalf("seed %d, step %d (%s): incremental translation differs (-full +incremental):\n%s\nchanges:\n%v",
					seed, i, w.log[len(w.log)-1], cmp.Diff(want, got), w.log)
			}
			if i > 0 {
				judged += tr.Judged
				full += len(w.in.Groups)
			}
			switch encoding.IntN(10) {
			case 0:
				continue
			case 1:
				tr.ForgetParts()
			}
			assertParts(t, &tr, got, want, maxBytes, fmt.Sprintf("seed %d, step %d (%s)", seed, i, w.log[len(w.log)-1]))
		}
	}
	// The point of it: most passes judge a few groups, not all of them.
	if judged*3 > full {
		t.Errorf("passes judged %d groups of %d listed: not incremental", judged, full)
	}
}

// TestTranslatorJudgesOnlyWhatDepends checks what one change costs in a workspace of 1,000 groups and 5,000
// keys: a leaf's limits judge that leaf alone and check no key; a root's limits judge its tree and check no key
// (all stay served); a team group being deleted judges its subtree and checks its keys and those below.
func TestTranslatorJudgesOnlyWhatDepends(t *testing.T) {
	in := bigWorkspace(10, 9, 10, 5)
	stampVersions(&in)
	var tr Translator
	tr.Translate(in)
	if tr.Judged != 1000 || tr.Checked != 5000 {
		t.Fatalf("first pass judged %d groups and checked %d keys, want all: 1000 and 5000", tr.Judged, tr.Checked)
	}
	for _, tc := range []struct {
		name            string
		group           string
		change          func(g *gatewayv1.Group)
		judged, checked int
	}{
		{"leaf limit", "root-003-c4-g7", func(g *gatewayv1.Group) { g.Spec.Models[0].RateLimits[0].Threshold = 1 }, 1, 0},
		{"root limits", "root-005", func(g *gatewayv1.Group) { g.Spec.Models[1].RateLimits[0].Threshold = 7 }, 100, 0},
		{"team deleting", "root-007-c2", func(g *gatewayv1.Group) { g.DeletionTimestamp = ptr.To(metav1.Now()) }, 11, 55},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := slicesIndexGroup(in.Groups, tc.group)
			g := in.Groups[i].DeepCopy()
			tc.change(g)
			g.Generation++
			in.Groups[i] = *g
			got := tr.Translate(in)
			if tr.Judged != tc.judged || tr.Checked != tc.checked {
				t.Errorf("judged %d groups and checked %d keys, want %d and %d", tr.Judged, tr.Checked, tc.judged, tc.checked)
			}
			want, _ := yaml.Marshal(Translate(in))
			if have, _ := yaml.Marshal(got); !bytes.Equal(have, want) {
				t.Errorf("incremental translation differs:\n%s", cmp.Diff(string(want), string(have)))
			}
		})
	}
}

// assertParts checks that the Translator's EncodeParts of got gives the parts of snapshot.EncodeParts(want).
func assertParts(t *testing.T, tr *Translator, got, want *snapshot.Snapshot, maxBytes int, at string) {
	t.Helper()
	gotParts, gotSum, err := tr.EncodeParts(got, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	wantParts, wantSum, err := snapshot.EncodeParts(want, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	if gotSum != wantSum || snapshot.PartList(gotParts) != snapshot.PartList(wantParts) {
		t.Fatalf("%s: parts differ (encoded %d, reused %d):\n%s\nwant\n%s", at, tr.PartsEncoded, tr.PartsReused,
			snapshot.PartList(gotParts), snapshot.PartList(wantParts))
	}
}

// TestTranslatorEncodeParts applies seeded changes to a workspace of 3,000 groups and 6,000 keys, several ranges
// of each, and checks after each that EncodeParts gives the parts of snapshot.EncodeParts over a full
// translation, and that a leaf's limit re-encodes its one range.
func TestTranslatorEncodeParts(t *testing.T) {
	in := bigWorkspace(30, 9, 10, 2)
	stampVersions(&in)
	rng := rand.New(rand.NewPCG(7, 7))
	var tr Translator
	rv := 1_000_000
	for step := range 30 {
		what := "first pass"
		switch op := rng.IntN(5); {
		case step == 0:
		case op <= 1:
			i := rng.IntN(len(in.Groups))
			g := in.Groups[i].DeepCopy()
			g.Spec.Models[0].RateLimits[0].Threshold = int64(1 + rng.IntN(5))
			g.Generation++
			in.Groups[i], what = *g, "limit of "+g.Name
		case op == 2:
			i := rng.IntN(len(in.Groups))
			what = "delete group " + in.Groups[i].Name
			in.Groups = append(in.Groups[:i:i], in.Groups[i+1:]...)
		case op == 3:
			i := rng.IntN(len(in.APIKeys))
			k := in.APIKeys[i].DeepCopy()
			k.Spec.KeySource.Prefix = fmt.Sprintf("mgk_moved%07d", rng.IntN(1_000_000))
			rv++
			k.ResourceVersion = strconv.Itoa(rv)
			in.APIKeys[i], what = *k, "new prefix of "+k.Name
		default:
			i := rng.IntN(len(in.APIKeys))
			what = "delete key " + in.APIKeys[i].Name
			in.APIKeys = append(in.APIKeys[:i:i], in.APIKeys[i+1:]...)
		}
		got := tr.Translate(in)
		assertParts(t, &tr, got, Translate(in), snapshot.MaxChunkBytes, fmt.Sprintf("step %d (%s)", step, what))
		if step == 0 && (tr.PartsReused != 0 || tr.PartsEncoded < 4) {
			t.Fatalf("first pass encoded %d ranges and reused %d, want every range, at least 4", tr.PartsEncoded, tr.PartsReused)
		}
		if strings.HasPrefix(what, "limit of ") && tr.PartsEncoded != 1 {
			t.Errorf("step %d (%s): encoded %d ranges, want 1 (reused %d)", step, what, tr.PartsEncoded, tr.PartsReused)
		}
		if step == 10 {
			// Another snapshot than the last pass's is encoded whole and leaves no memory behind.
			other := Translate(in)
			other.Groups[0].DisplayName = "not what the Translator translated"
			tr.ForgetParts()
			if _, _, err := tr.EncodeParts(other, snapshot.MaxChunkBytes); err != nil {
				t.Fatal(err)
			}
			assertParts(t, &tr, got, Translate(in), snapshot.MaxChunkBytes, "after encoding another snapshot")
		}
	}
}

func slicesIndexGroup(groups []gatewayv1.Group, name string) int {
	for i := range groups {
		if groups[i].Name == name {
			return i
		}
	}
	panic("no group " + name)
}

// TestTranslatorGolden translates the golden inputs with a Translator, cold and then again warm with nothing
// changed, and compares with the golden outputs of Translate.
func TestTranslatorGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range inputs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			in := loadInput(t, path)
			stampVersions(&in)
			want, _ := yaml.Marshal(Translate(in))
			var tr Translator
			for _, pass := range []string{"cold", "warm"} {
				got, err := yaml.Marshal(tr.Translate(in))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s pass differs from Translate (-want +got):\n%s", pass, cmp.Diff(string(want), string(got)))
				}
			}
		})
	}
}

// stampVersions gives every group and key the UID, generation and resourceVersion the API server would.
func stampVersions(in *Input) {
	for i := range in.Groups {
		g := &in.Groups[i]
		g.UID, g.Generation, g.ResourceVersion = types.UID("uid-"+g.Name), 1, strconv.Itoa(i+1)
	}
	for i := range in.APIKeys {
		in.APIKeys[i].ResourceVersion = strconv.Itoa(len(in.Groups) + i + 1)
	}
	for i := range in.WorkspaceAPIKeys {
		in.WorkspaceAPIKeys[i].ResourceVersion = strconv.Itoa(len(in.Groups) + len(in.APIKeys) + i + 1)
	}
}
