package reload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"

	listersv1 "k8s.io/client-go/listers/core/v1"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/test/testutil"
)

// scaleGroups is the size of the scale benchmarks' workspace, with ten keys per group. The default keeps `make
// bench` short; MODELGATE_SCALE_GROUPS=100000 measures the 100,000 groups and 1,000,000 keys of
// docs/scaling.md.
func scaleGroups(b *testing.B) int {
	n := 10000
	if v := os.Getenv("MODELGATE_SCALE_GROUPS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			b.Fatalf("MODELGATE_SCALE_GROUPS=%q: want an integer of at least 100", v)
		}
	}
	return n
}

// scaleWorkspace is the translated form of the scale series' workspace (test/loadbench bigWorkspace): n groups in
// 3-level CASCADING trees of 100 (a root, 9 teams, 10 leaves per team), one slug with a REQUEST per MINUTE and a
// TOKEN per DAY limit per level, and keys federated keys (key i in group i%n) from a seeded generator.
func scaleWorkspace(n, keys int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Namespace: ns, Endpoints: []snapshot.Endpoint{{ID: "plain", Slug: "bench/plain",
		Targets: []snapshot.Target{{Provider: "OPENAI", BaseURL: "http://upstream:8000/v1"}}}}}
	for i := range n {
		tree, j := i/100, i%100
		name := fmt.Sprintf("t%04d-g%02d", tree, j)
		chain := []string{name}
		switch {
		case j == 0:
		case j < 10:
			chain = append(chain, fmt.Sprintf("t%04d-g00", tree))
		default:
			chain = append(chain, fmt.Sprintf("t%04d-g%02d", tree, 1+(j-10)/10), fmt.Sprintf("t%04d-g00", tree))
		}
		g := snapshot.Group{ID: name, ExternalEntityID: "ext-" + name, Mode: "CASCADING", Depth: len(chain)}
		if len(chain) > 1 {
			g.ParentID = chain[1]
		}
		m := snapshot.Model{Slug: "bench/plain"}
		for d, src := range chain {
			scale := int64(1)
			for range len(chain) - 1 - d {
				scale *= 10
			}
			m.RateLimits = append(m.RateLimits, snapshot.Limit{Type: "REQUEST", Unit: "MINUTE", Threshold: 1_000_000 / scale, SourceGroup: src})
			m.UsageLimits = append(m.UsageLimits, snapshot.Limit{Type: "TOKEN", Unit: "DAY", Threshold: 1_000_000_000 / scale, SourceGroup: src})
		}
		g.Models = []snapshot.Model{m}
		s.Groups = append(s.Groups, g)
	}
	slices.SortFunc(s.Groups, func(a, b snapshot.Group) int { return strings.Compare(a.ID, b.ID) })
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	random := func(k int) string {
		b := make([]byte, k)
		for i := range b {
			b[i] = base62[rng.IntN(len(base62))]
		}
		return string(b)
	}
	for i := range keys {
		key := "mgk_" + random(12) + "." + random(32)
		sum := sha256.Sum256([]byte(key))
		s.APIKeys = append(s.APIKeys, snapshot.APIKey{ID: fmt.Sprintf("key-%06d", i), Prefix: key[:16],
			Hash: hex.EncodeToString(sum[:]), GroupID: s.Groups[i%n].ID})
	}
	slices.SortFunc(s.APIKeys, func(a, b snapshot.APIKey) int { return strings.Compare(a.Prefix, b.Prefix) })
	return s
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// scaleStore publishes the content-addressed parts of two versions of the scale workspace, the second changed
// by change, as the manager does, and returns the two indexes' writers. The snapshots themselves are not kept:
// only the ConfigMaps, as in gatewayd's informer cache.
func scaleStore(b *testing.B, groups int, change func(*snapshot.Snapshot)) (*cmStore, [2]func(version int64)) {
	_, s := newLoader(b)
	snap := scaleWorkspace(groups, 10*groups)
	var writers [2]func(int64)
	for i := range 2 {
		if i == 1 {
			change(snap)
		}
		parts, sum, err := snapshot.EncodeParts(snap, snapshot.MaxChunkBytes)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range parts {
			s.put(snapshot.PartName(p.Hash), nil, p.Payload)
		}
		list := snapshot.PartList(parts)
		n := len(parts)
		writers[i] = func(version int64) {
			s.put(snapshot.IndexName, map[string]string{snapshot.DataVersion: strconv.FormatInt(version, 10), snapshot.DataChecksum: sum,
				snapshot.DataChunks: strconv.Itoa(n), snapshot.DataFormat: snapshot.FormatContent, snapshot.DataParts: list}, nil)
		}
	}
	return s, writers
}

// writeHeapProfile writes the live heap to $MODELGATE_SCALE_HEAPPROFILE, when set, to see where the bytes the
// loader keeps are: go tool pprof -sample_index=inuse_space.
func writeHeapProfile(b *testing.B) {
	path := os.Getenv("MODELGATE_SCALE_HEAPPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLoadScale is a gatewayd start on the scale workspace (every part decoded, the view built and swapped
// in), and reports the heap the loader keeps for it afterwards: the view and the memory of decoded parts, not
// counting the ConfigMaps of the informer cache.
func BenchmarkLoadScale(b *testing.B) {
	groups := scaleGroups(b)
	st, index := scaleStore(b, groups, func(*snapshot.Snapshot) {})
	index[0](1)
	base := heapInUse()
	var kept uint64
	for b.Loop() {
		l, _ := newLoader(b)
		l.listers[ns] = listersv1.NewConfigMapLister(st.indexer)
		l.Sync(context.Background(), ns)
		if l.servedVersion(b) != 1 {
			b.Fatalf("not loaded: %v errors", l.errorsOf())
		}
		b.StopTimer()
		kept = heapInUse() - base
		writeHeapProfile(b)
		runtime.KeepAlive(l)
		b.StartTimer()
	}
	b.ReportMetric(float64(kept)/(1<<20), "retained-MiB")
	b.ReportMetric(float64(kept)/float64(10*groups), "retained-B/key")
}

// BenchmarkChangeScale is what gatewayd pays for one change of the scale workspace: loads alternate between two
// versions that differ in one group's limit (group), or in one key, present in one and revoked in the other (key):
// the key index is then rebuilt.
func BenchmarkChangeScale(b *testing.B) {
	for _, tc := range []struct {
		name   string
		change func(*snapshot.Snapshot)
	}{
		{"group", func(s *snapshot.Snapshot) { s.Groups[len(s.Groups)/2].Models[0].RateLimits[0].Threshold++ }},
		{"key", func(s *snapshot.Snapshot) { s.APIKeys = slices.Delete(s.APIKeys, len(s.APIKeys)/2, len(s.APIKeys)/2+1) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			st, index := scaleStore(b, scaleGroups(b), tc.change)
			l, _ := newLoader(b)
			l.listers[ns] = listersv1.NewConfigMapLister(st.indexer)
			index[0](1)
			l.Sync(context.Background(), ns)
			version := int64(1)
			for b.Loop() {
				version++
				index[version%2](version)
				l.Sync(context.Background(), ns)
				if got := l.servedVersion(b); got != version {
					b.Fatalf("version %d not loaded (serving %d): %v errors", version, got, l.errorsOf())
				}
			}
		})
	}
}

// BenchmarkColdDecodeScale is the decode of a gatewayd start on the scale workspace: every part read, verified and
// decoded, and every part of keys turned into its compact block, as loadParts does with no view being served; the
// view is not built (BenchmarkLoadScale includes that).
func BenchmarkColdDecodeScale(b *testing.B) {
	st, index := scaleStore(b, scaleGroups(b), func(*snapshot.Snapshot) {})
	index[0](1)
	l, _ := newLoader(b)
	l.listers[ns] = listersv1.NewConfigMapLister(st.indexer)
	idx, err := l.lister(ns).Get(snapshot.IndexName)
	if err != nil {
		b.Fatal(err)
	}
	list, sum := idx.Data[snapshot.DataParts], idx.Data[snapshot.DataChecksum]
	cpu0 := testutil.ProcessCPU()
	for b.Loop() {
		s, keys, _, err := l.loadParts(ns, l.lister(ns), list, sum, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(s.Groups) == 0 || len(keys) == 0 {
			b.Fatalf("decoded %d groups and %d key parts", len(s.Groups), len(keys))
		}
	}
	b.ReportMetric(float64(testutil.ProcessCPU()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
}
