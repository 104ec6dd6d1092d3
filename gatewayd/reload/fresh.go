package reload

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Defaults of a miss's hold (docs/limits.md "Read-your-writes on every replica").
const (
	// DefaultMissHold bounds how long a call that names something the view does not serve waits for this
	// replica to load the snapshots published before it.
	DefaultMissHold = 3 * time.Second
	// checkGap spaces two reads of the published snapshot versions: however many misses arrive, a replica reads
	// them at most once per gap, and every miss waiting shares the next read.
	checkGap = 50 * time.Millisecond
)

// Outcomes of a miss, the label of modelgate_snapshot_misses_total.
const (
	missCaughtUp  = "caught_up"  // the view changed: the caller looks again
	missNoneNewer = "none_newer" // nothing published before the call is unserved: the miss stands
	missTimeout   = "timeout"    // the hold's bound (or the call's end) came first
	missError     = "error"      // the published versions could not be read: the miss stands
)

// SetMissHold sets the bound of CatchUp's hold (DefaultMissHold until then; zero or less turns the hold off). Call
// it before Run.
func (l *Loader) SetMissHold(d time.Duration) { l.missHold = d }

// CatchUp is called on a miss: a call named a key, endpoint, model, deployment or chain that seen, the view it
// was looked up in, does not serve. The object may have been written through another replica a moment ago, its
// answer sent once that replica served it, while this one has not loaded that snapshot yet. CatchUp reads the
// resourceVersion of every snapshot index published now (of namespace ns, or of every served namespace when ns is
// ""), shared with the other misses of the moment and at most once per checkGap, and waits until this replica has
// handled each of them (loaded, or refused), bounded by the miss hold. It returns true when the view in force is
// no longer seen, so the caller looks again; false when the miss stands. A hit never comes here: it costs nothing.
func (l *Loader) CatchUp(ctx context.Context, seen *view.View, ns string) bool {
	if l.View() != seen {
		l.misses.WithLabelValues(missCaughtUp).Inc()
		return true
	}
	if l.missHold <= 0 || l.fresh == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, l.missHold)
	defer cancel()
	c := l.fresh.join()
	select {
	case <-c.done:
	case <-ctx.Done():
		l.misses.WithLabelValues(missTimeout).Inc()
		return l.View() != seen
	}
	if c.err != nil {
		l.misses.WithLabelValues(missError).Inc()
		return l.View() != seen
	}
	for {
		progress := l.Progress()
		if !l.behind(c.published, ns) {
			break
		}
		select {
		case <-progress:
		case <-ctx.Done():
			l.misses.WithLabelValues(missTimeout).Inc()
			return l.View() != seen
		}
	}
	if l.View() == seen {
		l.misses.WithLabelValues(missNoneNewer).Inc()
		return false
	}
	l.misses.WithLabelValues(missCaughtUp).Inc()
	return true
}

// Progress returns a channel closed once the loader has handled a snapshot index (loaded or refused it). Read
// what it handled after it closes, then call Progress again.
func (l *Loader) Progress() <-chan struct{} { return *l.progress.Load() }

// handled records that the index of ns at resourceVersion rv was loaded or refused, and wakes CatchUp's waiters.
func (l *Loader) handled(ns, rv string) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	l.mu.Lock()
	if v > l.seen[ns] {
		l.seen[ns] = v
	}
	l.mu.Unlock()
	next := make(chan struct{})
	close(*l.progress.Swap(&next))
}

// behind reports whether an index of published (resourceVersions by namespace) has not been handled yet, of ns
// alone when it is not "".
func (l *Loader) behind(published map[string]uint64, ns string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, rv := range published {
		if (ns == "" || name == ns) && rv > l.seen[name] {
			return true
		}
	}
	return false
}

// freshness reads the resourceVersions of the published snapshot indexes for CatchUp: one read at a time, at
// most one per checkGap, and a miss joins the next read to start (never one already under way, which may have
// started before the write it looks for was answered).
type freshness struct {
	read func(context.Context) (map[string]uint64, error)

	mu      sync.Mutex
	next    *check
	running bool
	last    time.Time
}

// check is one read of the published versions; done is closed once published or err is set.
type check struct {
	done      chan struct{}
	published map[string]uint64
	err       error
}

// join returns the next read to start, starting the reader when none runs.
func (f *freshness) join() *check {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == nil {
		f.next = &check{done: make(chan struct{})}
		if !f.running {
			f.running = true
			go f.run()
		}
	}
	return f.next
}

// run makes the reads misses wait for, until none waits.
func (f *freshness) run() {
	for {
		if wait := checkGap - time.Since(f.last); wait > 0 {
			time.Sleep(wait) // misses arriving meanwhile join the same read
		}
		f.mu.Lock()
		c := f.next
		f.next = nil
		if c == nil {
			f.running = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		f.last = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), DefaultMissHold)
		c.published, c.err = f.read(ctx)
		cancel()
		close(c.done)
	}
}

// newFreshness reads the indexes' metadata only (never their payloads) through the typed client's REST client:
// one list across the cluster when namespaces is empty, one per served namespace otherwise. Nil when the client
// has no REST client (a fake one): misses then stand at once.
func newFreshness(rc rest.Interface, namespaces []string) *freshness {
	if c, ok := rc.(*rest.RESTClient); !ok || c == nil {
		return nil
	}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	return &freshness{read: func(ctx context.Context) (map[string]uint64, error) {
		out := map[string]uint64{}
		for _, ns := range namespaces {
			raw, err := rc.Get().Namespace(ns).Resource("configmaps").
				VersionedParams(&metav1.ListOptions{LabelSelector: snapshot.LabelKey, FieldSelector: "metadata.name=" + snapshot.IndexName},
					scheme.ParameterCodec).
				SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").
				Do(ctx).Raw()
			if err != nil {
				return nil, fmt.Errorf("failed to list the snapshot indexes of %q: %w", ns, err)
			}
			var list metav1.PartialObjectMetadataList
			if err := json.Unmarshal(raw, &list); err != nil {
				return nil, fmt.Errorf("failed to decode the snapshot indexes of %q: %w", ns, err)
			}
			for _, cm := range list.Items {
				if rv, err := strconv.ParseUint(cm.ResourceVersion, 10, 64); err == nil {
					out[cm.Namespace] = rv
				}
			}
		}
		return out, nil
	}}
}
