package reload

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/api/snapshot"
)

// publisher stands for the API server's published index versions: CatchUp reads them through it, counted.
type publisher struct {
	mu        sync.Mutex
	published map[string]uint64
	err       error
	reads     atomic.Int32
}

func (p *publisher) read(context.Context) (map[string]uint64, error) {
	p.reads.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.published), p.err
}

func (p *publisher) set(rv uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published[ns], p.err = rv, err
}

// indexAt writes an inline index of version at resourceVersion rv, as the API server would have stored it.
func (s *cmStore) indexAt(rv uint64, version int64, sum string, payload []byte) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: snapshot.IndexName, Namespace: ns, ResourceVersion: strconv.FormatUint(rv, 10)},
		Data: map[string]string{snapshot.DataVersion: strconv.FormatInt(version, 10), snapshot.DataChecksum: sum,
			snapshot.DataChunks: "0", snapshot.DataFormat: snapshot.Format},
		BinaryData: map[string][]byte{snapshot.BinaryPayload: payload}}
	if err := s.indexer.Update(cm); err != nil {
		s.t.Fatal(err)
	}
}

func (l *Loader) missesOf(outcome string) float64 {
	return testutil.ToFloat64(l.misses.WithLabelValues(outcome))
}

// catchUp runs CatchUp for a miss in the view in force and returns its answer on a channel.
func catchUp(l *Loader) <-chan bool {
	out := make(chan bool, 1)
	seen := l.View()
	go func() { out <- l.CatchUp(context.Background(), seen, ns) }()
	return out
}

func TestCatchUp(t *testing.T) {
	ctx := context.Background()
	l, s := newLoader(t)
	p1, sum1 := encode(t, "a")
	s.indexAt(10, 1, sum1, p1)
	l.Sync(ctx, ns)
	pub := &publisher{published: map[string]uint64{ns: 10}}
	l.fresh = &freshness{read: pub.read}

	t.Run("NothingNewerStandsAndMissesShareReads", func(t *testing.T) {
		const misses = 200
		var wg sync.WaitGroup
		var held atomic.Int32
		for range misses {
			wg.Go(func() {
				if l.CatchUp(ctx, l.View(), "") {
					held.Add(1)
				}
			})
		}
		wg.Wait()
		if held.Load() != 0 {
			t.Fatalf("%d misses looked again although nothing newer was published", held.Load())
		}
		// Misses at once share a read of the published versions: never one read per miss.
		if n := pub.reads.Load(); n < 1 || n > misses/10 {
			t.Fatalf("%d misses read the published versions %d times, want 1 to %d", misses, n, misses/10)
		}
		if got := l.missesOf(missNoneNewer); got != misses {
			t.Fatalf("none_newer counted %v misses, want %d", got, misses)
		}
	})

	t.Run("NewerPublishedHoldsUntilLoaded", func(t *testing.T) {
		pub.set(11, nil)
		got := catchUp(l)
		select {
		case r := <-got:
			t.Fatalf("CatchUp answered %v before the newer snapshot was loaded", r)
		case <-time.After(200 * time.Millisecond):
		}
		p2, sum2 := encode(t, "a", "b")
		s.indexAt(11, 2, sum2, p2)
		l.Sync(ctx, ns)
		if !<-got {
			t.Fatal("CatchUp did not look again once the newer snapshot was loaded")
		}
		if l.servedVersion(t) != 2 {
			t.Fatalf("serving version %d, want 2", l.servedVersion(t))
		}
	})

	t.Run("RefusedSnapshotEndsTheHold", func(t *testing.T) {
		pub.set(12, nil)
		got := catchUp(l)
		p3, _ := encode(t, "a", "b", "c")
		s.indexAt(12, 3, sum1, p3) // a checksum that does not match: refused
		l.Sync(ctx, ns)
		if <-got {
			t.Fatal("CatchUp looked again although the newer snapshot was refused")
		}
		if l.missesOf(missTimeout) != 0 {
			t.Fatal("the hold ran to its bound although the loader had handled the newer index")
		}
	})

	t.Run("BoundedWhenNeverLoaded", func(t *testing.T) {
		l.SetMissHold(100 * time.Millisecond)
		defer l.SetMissHold(DefaultMissHold)
		pub.set(13, nil)
		if <-catchUp(l) {
			t.Fatal("CatchUp looked again although nothing newer was loaded")
		}
		if l.missesOf(missTimeout) != 1 {
			t.Fatalf("timeout counted %v, want 1", l.missesOf(missTimeout))
		}
	})

	t.Run("UnreadableVersionsLeaveTheMiss", func(t *testing.T) {
		pub.set(13, errors.New("the API server is unreachable"))
		if <-catchUp(l) {
			t.Fatal("CatchUp looked again although the published versions could not be read")
		}
		if l.missesOf(missError) != 1 {
			t.Fatalf("error counted %v, want 1", l.missesOf(missError))
		}
	})
}
