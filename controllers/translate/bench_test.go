package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/testutil"
)

// BenchmarkMaterialize10kGroups measures one materializer pass without an API server: translation, encoding and
// chunking of a workspace of 10,000 groups in three levels (100 roots, 900 children, 9,000 grandchildren; half
// the trees CASCADING) and 50,000 keys.
//
//	go test -run '^$' -bench Materialize -benchtime 3x ./controllers/translate/
func BenchmarkMaterialize10kGroups(b *testing.B) {
	in := bigWorkspace(100, 9, 10, 5)
	if len(in.Groups) != 10000 || len(in.APIKeys) != 50000 {
		b.Fatalf("workspace has %d groups and %d keys", len(in.Groups), len(in.APIKeys))
	}
	var last *snapshot.Snapshot
	var payloadBytes, chunks int
	for b.Loop() {
		s := Translate(in)
		if len(s.Groups) != 10000 || len(s.APIKeys) != 50000 {
			b.Fatalf("snapshot has %d groups and %d keys", len(s.Groups), len(s.APIKeys))
		}
		payload, _, err := snapshot.Encode(s)
		if err != nil {
			b.Fatal(err)
		}
		chunks = len(snapshot.Split(payload, snapshot.MaxChunkBytes))
		payloadBytes, last = len(payload), s
	}
	raw, err := json.Marshal(last)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(raw)), "json-bytes")
	b.ReportMetric(float64(payloadBytes), "gzip-bytes")
	b.ReportMetric(float64(chunks), "chunks")
}

// bigWorkspace builds roots trees of 1 + children + children*grandchildren groups, with keysPerGroup hash keys each.
func bigWorkspace(roots, children, grandchildren, keysPerGroup int) Input {
	in := Input{Namespace: "bench"}
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	add := func(name, parent string, mode gatewayv1.LimitEnforcement, scale int64) {
		g := gatewayv1.Group{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", CreationTimestamp: created},
			Spec: gatewayv1.GroupSpec{
				ExternalEntityID: "ext-" + name,
				Hierarchy:        gatewayv1.Hierarchy{LimitEnforcement: mode},
				Models: []gatewayv1.ModelConfig{
					{Slug: "demo/echo",
						RateLimits:  []gatewayv1.Limit{{Type: gatewayv1.LimitTypeRequest, Unit: gatewayv1.UnitMinute, Threshold: 600 / scale}},
						UsageLimits: []gatewayv1.Limit{{Type: gatewayv1.LimitTypeToken, Unit: gatewayv1.UnitDay, Threshold: 1_000_000 / scale}}},
					{Slug: "demo/embed",
						RateLimits: []gatewayv1.Limit{{Type: gatewayv1.LimitTypeToken, Unit: gatewayv1.UnitMinute, Threshold: 60_000 / scale}}},
				},
			},
		}
		if parent != "" {
			g.Spec.Hierarchy.ParentGroupID = ptr.To(parent)
		}
		in.Groups = append(in.Groups, g)
		for k := range keysPerGroup {
			prefix := fmt.Sprintf("mgk_%012d", len(in.APIKeys))
			sum := sha256.Sum256([]byte(fmt.Sprintf("%s.%s-%d", prefix, name, k)))
			in.APIKeys = append(in.APIKeys, gatewayv1.APIKey{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-key-%d", name, k), Namespace: "bench", CreationTimestamp: created},
				Spec: gatewayv1.APIKeySpec{GroupID: name,
					KeySource: gatewayv1.KeySource{Prefix: prefix, Hash: hex.EncodeToString(sum[:])}},
			})
		}
	}
	for r := range roots {
		mode := gatewayv1.EnforcementIndependent
		if r%2 == 1 {
			mode = gatewayv1.EnforcementCascading
		}
		root := fmt.Sprintf("root-%03d", r)
		add(root, "", mode, 1)
		for c := range children {
			child := fmt.Sprintf("%s-c%d", root, c)
			add(child, root, mode, 2)
			for gc := range grandchildren {
				add(fmt.Sprintf("%s-g%d", child, gc), child, mode, 4)
			}
		}
	}
	return in
}

// BenchmarkTranslateOnly and BenchmarkEncodeParts split a materializer pass of 10,000 groups and 100,000 keys
// into translation and the content-addressed encoding.
//
//	go test -run '^$' -bench 'TranslateOnly|EncodeParts' -benchtime 3x ./controllers/translate/
func BenchmarkTranslateOnly(b *testing.B) {
	in := bigWorkspace(100, 9, 10, 10)
	for b.Loop() {
		Translate(in)
	}
}

func BenchmarkEncodeParts(b *testing.B) {
	s := Translate(bigWorkspace(100, 9, 10, 10))
	for b.Loop() {
		if _, _, err := snapshot.EncodeParts(s, snapshot.MaxChunkBytes); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMaterializeChange measures what the materializer pays for one single-group change (a leaf's
// REQUEST per MINUTE limit flips) at 10,000 and 100,000 groups with 10 keys each: translation and the
// content-addressed encoding, as it was ("full": Translate, then a snapshot.PartsEncoder that compares every
// range with the last pass's) and as it is ("incremental": a Translator and its EncodeParts). The listing from
// the informer cache is not included.
//
//	go test -run '^$' -bench MaterializeChange -benchtime 5x -timeout 30m ./controllers/translate/
func BenchmarkMaterializeChange(b *testing.B) {
	for _, size := range []struct {
		name  string
		roots int
	}{{"groups=10k", 100}, {"groups=100k", 1000}} {
		// "translator" is incremental without the encoding, to split the two.
		for _, mode := range []string{"full", "incremental", "translator"} {
			b.Run(size.name+"/"+mode, func(b *testing.B) {
				in := bigWorkspace(size.roots, 9, 10, 10)
				stampVersions(&in)
				var tr Translator
				translate := Translate
				if mode != "full" {
					translate = tr.Translate
				}
				var enc snapshot.PartsEncoder
				materialize := func() {
					s := translate(in)
					var err error
					switch mode {
					case "full":
						_, _, err = enc.Encode(s, snapshot.MaxChunkBytes)
					case "incremental":
						_, _, err = tr.EncodeParts(s, snapshot.MaxChunkBytes)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				// The first pass translates everything, as after a restart.
				cold := testutil.ProcessCPU()
				materialize()
				firstPass := testutil.ProcessCPU() - cold
				leaf := &in.Groups[len(in.Groups)/2+5]
				if leaf.ParentID() == "" {
					b.Fatalf("group %s is a root", leaf.Name)
				}
				limit := &leaf.Spec.Models[0].RateLimits[0].Threshold
				high := *limit
				// The machine is shared: CPU time per change is steadier than the wall time.
				cpu0, n := testutil.ProcessCPU(), 0
				for i := 0; b.Loop(); i++ {
					*limit = high - int64(i%2)
					leaf.Generation++
					materialize()
					n++
				}
				b.ReportMetric(float64(testutil.ProcessCPU()-cpu0)/float64(n)/1e6, "cpu-ms/op")
				b.ReportMetric(float64(firstPass)/1e6, "first-pass-cpu-ms")
				switch mode {
				case "full":
					b.ReportMetric(float64(enc.Encoded), "ranges-encoded")
				case "incremental":
					b.ReportMetric(float64(tr.PartsEncoded), "ranges-encoded")
				}
				if mode != "full" {
					b.ReportMetric(float64(tr.Judged), "groups-judged")
					b.ReportMetric(float64(tr.Checked), "keys-checked")
					// The Translator's memory: the heap it frees when forgotten, its parts' memory included.
					var ms runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&ms)
					held := ms.HeapAlloc
					runtime.KeepAlive(&tr)
					tr = Translator{}
					runtime.GC()
					runtime.ReadMemStats(&ms)
					b.ReportMetric(float64(held-ms.HeapAlloc)/(1<<20), "cache-MiB")
					runtime.KeepAlive(in.Groups)
					runtime.KeepAlive(in.APIKeys)
					runtime.KeepAlive(&enc)
				}
			})
		}
	}
}

// BenchmarkTranslatorFirstPass is a Translator's first pass over 10,000 groups and 100,000 keys, as after a
// restart, against Translate of the same workspace.
//
//	go test -run '^$' -bench FirstPass -benchtime 5x ./controllers/translate/
func BenchmarkTranslatorFirstPass(b *testing.B) {
	in := bigWorkspace(100, 9, 10, 10)
	stampVersions(&in)
	b.Run("translate", func(b *testing.B) {
		for b.Loop() {
			Translate(in)
		}
	})
	b.Run("translator", func(b *testing.B) {
		for b.Loop() {
			var tr Translator
			tr.Translate(in)
		}
	})
}
