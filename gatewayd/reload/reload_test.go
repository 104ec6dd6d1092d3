package reload

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/limits"
)

// These tests drive the reassembly and verification rules over an in-memory informer index; the watch
// itself runs against a real API server in the gatewayd integration tests.

const ns = "ws"

type cmStore struct {
	t       testing.TB
	indexer cache.Indexer
}

func newLoader(t testing.TB) (*Loader, *cmStore) {
	l, err := New(nil, []string{ns}, limits.NewMemory(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := &cmStore{t: t, indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
	l.listers[ns] = listersv1.NewConfigMapLister(s.indexer)
	return l, s
}

func (s *cmStore) put(name string, data map[string]string, payload []byte) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data,
		BinaryData: map[string][]byte{snapshot.BinaryPayload: payload}}
	if err := s.indexer.Update(cm); err != nil {
		s.t.Fatal(err)
	}
}

func encode(t *testing.T, groups ...string) ([]byte, string) {
	s := &snapshot.Snapshot{Namespace: ns}
	for _, g := range groups {
		s.Groups = append(s.Groups, snapshot.Group{ID: g, Mode: "INDEPENDENT", Depth: 1})
	}
	payload, sum, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	return payload, sum
}

// index writes an index for version with n chunks (inline payload when n is 0).
func (s *cmStore) index(version int64, sum string, n int, inline []byte) {
	s.put(snapshot.IndexName, map[string]string{snapshot.DataVersion: strconv.FormatInt(version, 10), snapshot.DataChecksum: sum,
		snapshot.DataChunks: strconv.Itoa(n), snapshot.DataFormat: snapshot.Format}, inline)
}

func (s *cmStore) chunks(version int64, payload []byte, size int) int {
	parts := snapshot.Split(payload, size)
	for i, p := range parts {
		s.put(snapshot.ChunkName(i+1), map[string]string{snapshot.DataVersion: strconv.FormatInt(version, 10)}, p)
	}
	return len(parts)
}

func (l *Loader) errorsOf() float64 { return testutil.ToFloat64(l.loadErrors.WithLabelValues(ns)) }

func (l *Loader) servedVersion(t testing.TB) int64 {
	t.Helper()
	n := l.View().Namespace(ns)
	if n == nil {
		return 0
	}
	return n.Version
}

func TestSyncRules(t *testing.T) {
	ctx := context.Background()
	l, s := newLoader(t)
	p1, sum1 := encode(t, "a")
	s.index(1, sum1, 0, p1)
	l.Sync(ctx, ns)
	if l.servedVersion(t) != 1 {
		t.Fatal("inline v1 not loaded")
	}
	select {
	case <-l.Ready():
		t.Fatal("ready before the informer synced")
	default:
	}
	l.initPending()
	select {
	case <-l.Ready():
	default:
		t.Fatal("not ready although every served namespace is loaded")
	}

	// Same version and checksum again (a chunk event, a resync): nothing to do, no error.
	l.Sync(ctx, ns)
	if l.errorsOf() != 0 {
		t.Fatal("a replay of the loaded version counted as an error")
	}

	// A write in flight: the index says v2 but its chunks already carry v3. Wait, no error.
	p2, sum2 := encode(t, "a", "b")
	p3, sum3 := encode(t, "a", "b", "c")
	n2 := len(snapshot.Split(p2, 32))
	n3 := s.chunks(3, p3, 32)
	if n3 < n2 {
		t.Fatalf("test setup: v3 has fewer chunks (%d) than v2 (%d)", n3, n2)
	}
	s.index(2, sum2, n2, nil)
	l.Sync(ctx, ns)
	if l.servedVersion(t) != 1 || l.errorsOf() != 0 {
		t.Fatalf("in-flight write: version %d errors %v, want 1 and 0", l.servedVersion(t), l.errorsOf())
	}
	// The index catches up: v3 loads from chunks.
	s.index(3, sum3, n3, nil)
	l.Sync(ctx, ns)
	if l.servedVersion(t) != 3 || len(l.View().Namespace(ns).Groups) != 3 {
		t.Fatalf("chunked v3 not loaded: version %d", l.servedVersion(t))
	}

	for _, tc := range []struct {
		name  string
		write func()
	}{
		{"older version", func() { s.index(2, sum2, 0, p2) }},
		{"same version, other checksum", func() { s.index(3, sum2, 0, p2) }},
		{"bad checksum", func() { s.index(4, sum1, 0, p2) }},
		{"unknown format", func() {
			s.put(snapshot.IndexName, map[string]string{snapshot.DataVersion: "4", snapshot.DataChecksum: sum2, snapshot.DataChunks: "0", snapshot.DataFormat: "v9"}, p2)
		}},
		{"version not a number", func() {
			s.put(snapshot.IndexName, map[string]string{snapshot.DataVersion: "four", snapshot.DataChecksum: sum2, snapshot.DataChunks: "0", snapshot.DataFormat: snapshot.Format}, p2)
		}},
		{"missing chunk", func() { s.index(5, sum3, n3+1, nil) }},
		{"stale chunk", func() {
			s.chunks(5, p3, 32)
			s.put(snapshot.ChunkName(1), map[string]string{snapshot.DataVersion: "4"}, p3[:32])
			s.index(5, sum3, n3, nil)
		}},
	} {
		before := l.errorsOf()
		tc.write()
		l.Sync(ctx, ns)
		if l.errorsOf() != before+1 {
			t.Errorf("%s: not counted as a load error", tc.name)
		}
		if l.servedVersion(t) != 3 {
			t.Fatalf("%s: serving version %d, want the last good 3", tc.name, l.servedVersion(t))
		}
	}
}

func TestLoadWaitsForChunks(t *testing.T) {
	l, s := newLoader(t)
	p, sum := encode(t, "a")
	s.chunks(7, p, 16)
	s.index(6, sum, len(snapshot.Split(p, 16)), nil)
	if _, err := l.load(ns, nil); !errors.Is(err, errWait) {
		t.Fatalf("load = %v, want errWait", err)
	}
}
