// Package reload keeps gatewayd's View current: it watches the snapshot ConfigMaps of the served namespaces
// with a client-go informer, reassembles index and chunks, verifies version and checksum, builds the new
// namespace view and swaps it in atomically. Anything wrong with a snapshot (corrupt, partial, older than the
// loaded one, inconsistent) leaves the last good view serving, counts an error and logs why.
package reload

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Loader watches snapshots and holds the current View.
type Loader struct {
	client     kubernetes.Interface
	namespaces []string
	store      limits.Store

	current atomic.Pointer[view.View]
	queue   workqueue.TypedInterface[string]
	listers map[string]listersv1.ConfigMapLister // by served namespace, "" when serving all

	readyOnce sync.Once
	ready     chan struct{}
	// changed is closed and replaced on every swap, so waiters wake without polling.
	changed atomic.Pointer[chan struct{}]
	mu      sync.Mutex
	pending map[string]bool // namespaces still waiting for their first good snapshot; nil before sync

	// parts caches, per namespace, the decoded parts of the last content-addressed snapshot loaded, by hash: a
	// change decodes only the parts it rewrote. Only the loader's worker touches it.
	partsMu sync.Mutex
	parts   map[string]map[string]*snapshot.Snapshot

	// seen is the resourceVersion of the last index of each namespace the loader handled (loaded or refused),
	// under mu; progress is closed and replaced each time, for CatchUp's waiters.
	seen     map[string]uint64
	progress atomic.Pointer[chan struct{}]
	// fresh reads the published indexes' versions for CatchUp, bounded by missHold; nil without a REST client.
	fresh    *freshness
	missHold time.Duration

	version    *prometheus.GaugeVec
	loadedAt   *prometheus.GaugeVec
	loadErrors *prometheus.CounterVec
	misses     *prometheus.CounterVec
}

// New returns a Loader for namespaces (empty means all) whose limit plans bind to store. Its metrics are
// registered with reg.
func New(client kubernetes.Interface, namespaces []string, store limits.Store, reg prometheus.Registerer) (*Loader, error) {
	l := &Loader{
		client:     client,
		namespaces: namespaces,
		store:      store,
		queue:      workqueue.NewTyped[string](),
		listers:    map[string]listersv1.ConfigMapLister{},
		parts:      map[string]map[string]*snapshot.Snapshot{},
		ready:      make(chan struct{}),
		seen:       map[string]uint64{},
		missHold:   DefaultMissHold,
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "modelgate_snapshot_version",
			Help: "Version of the snapshot gatewayd serves, per namespace.",
		}, []string{"namespace"}),
		loadedAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "modelgate_snapshot_last_load_timestamp_seconds",
			Help: "When gatewayd last put a snapshot of the namespace in service, in Unix seconds: with modelgate_snapshot_load_errors_total, it tells a replica that keeps refusing newer snapshots.",
		}, []string{"namespace"}),
		loadErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelgate_snapshot_load_errors_total",
			Help: "Snapshots refused (corrupt, partial, older or inconsistent), per namespace; the last good one keeps serving.",
		}, []string{"namespace"}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelgate_snapshot_misses_total",
			Help: "Calls that named something the served view lacked and checked for a newer published snapshot, by outcome (caught_up, none_newer, timeout, error).",
		}, []string{"outcome"}),
	}
	if client != nil {
		l.fresh = newFreshness(client.CoreV1().RESTClient(), namespaces)
	}
	l.current.Store(view.Empty())
	changed, progress := make(chan struct{}), make(chan struct{})
	l.changed.Store(&changed)
	l.progress.Store(&progress)
	for _, c := range []prometheus.Collector{l.version, l.loadedAt, l.loadErrors, l.misses} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("failed to register snapshot metrics: %w", err)
		}
	}
	return l, nil
}

// View returns the current view. It never returns nil.
func (l *Loader) View() *view.View { return l.current.Load() }

// Changed returns a channel that is closed at the next swap of the view. Read View after it closes, then call
// Changed again.
func (l *Loader) Changed() <-chan struct{} { return *l.changed.Load() }

// Ready is closed once every served namespace has loaded its first good snapshot. When serving all
// namespaces, that is every namespace holding a snapshot index when the informer first synced.
func (l *Loader) Ready() <-chan struct{} { return l.ready }

// Run watches until ctx is done.
func (l *Loader) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("reload")
	ctx = logr.NewContext(ctx, log)
	selector := func(o *metav1.ListOptions) { o.LabelSelector = snapshot.LabelKey }
	namespaces := l.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var synced []cache.InformerSynced
	for _, ns := range namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(l.client, 0,
			informers.WithNamespace(ns), informers.WithTweakListOptions(selector))
		inf := f.Core().V1().ConfigMaps()
		_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    l.enqueue,
			UpdateFunc: func(_, o any) { l.enqueue(o) },
			DeleteFunc: l.enqueue,
		})
		if err != nil {
			return fmt.Errorf("failed to watch snapshot ConfigMaps in %q: %w", ns, err)
		}
		l.listers[ns] = inf.Lister()
		synced = append(synced, inf.Informer().HasSynced)
		f.Start(ctx.Done())
	}
	defer l.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("failed to sync snapshot ConfigMaps: %w", ctx.Err())
	}
	l.initPending()
	go func() {
		<-ctx.Done()
		l.queue.ShutDown()
	}()
	for l.next(ctx) {
	}
	return nil
}

func (l *Loader) enqueue(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		l.queue.Add(cm.Namespace)
	}
}

// initPending decides which namespaces readiness waits for.
func (l *Loader) initPending() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = map[string]bool{}
	if len(l.namespaces) > 0 {
		for _, ns := range l.namespaces {
			l.pending[ns] = true
		}
	} else {
		cms, _ := l.listers[metav1.NamespaceAll].List(labels.Everything())
		for _, cm := range cms {
			if cm.Name == snapshot.IndexName {
				l.pending[cm.Namespace] = true
			}
		}
	}
	for ns := range l.pending {
		if l.View().Namespace(ns) != nil {
			delete(l.pending, ns)
		}
	}
	l.checkReady()
}

func (l *Loader) loaded(ns string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending != nil {
		delete(l.pending, ns)
		l.checkReady()
	}
}

func (l *Loader) checkReady() {
	if len(l.pending) == 0 {
		l.readyOnce.Do(func() { close(l.ready) })
	}
}

func (l *Loader) next(ctx context.Context) bool {
	ns, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(ns)
	l.Sync(ctx, ns)
	return true
}

func (l *Loader) lister(ns string) listersv1.ConfigMapNamespaceLister {
	if ls, ok := l.listers[ns]; ok {
		return ls.ConfigMaps(ns)
	}
	return l.listers[metav1.NamespaceAll].ConfigMaps(ns)
}

// errWait means a write is in flight: the chunks already carry a newer version than the index.
var errWait = errors.New("snapshot write in flight")

// Sync loads the snapshot of ns from the informer cache, if it is new and good.
func (l *Loader) Sync(ctx context.Context, ns string) {
	log := logr.FromContextOrDiscard(ctx).WithValues("namespace", ns)
	cur := l.View().Namespace(ns)
	// The index as it is before the load: what the load handles is that one or a later one.
	var rv string
	if idx, err := l.lister(ns).Get(snapshot.IndexName); err == nil {
		rv = idx.ResourceVersion
	}
	loaded, err := l.load(ns, cur)
	switch {
	case errors.Is(err, errWait):
		log.V(1).Info("Waiting for snapshot chunks", "reason", err.Error())
		return
	case err != nil:
		l.loadErrors.WithLabelValues(ns).Inc()
		log.Error(err, "Refused snapshot; keeping the last good one", "loadedVersion", versionOf(cur))
		l.handled(ns, rv)
		return
	case loaded == nil:
		l.handled(ns, rv)
		return
	}
	l.current.Store(l.View().With(loaded))
	next := make(chan struct{})
	close(*l.changed.Swap(&next))
	l.release(cur, loaded)
	l.version.WithLabelValues(ns).Set(float64(loaded.Version))
	l.loadedAt.WithLabelValues(ns).SetToCurrentTime()
	// The refusal counter starts at 0 with the namespace's first good load, so that an alert's increase() sees
	// the first refusal too.
	l.loadErrors.WithLabelValues(ns)
	log.Info("Loaded snapshot", "version", loaded.Version, "groups", len(loaded.Groups), "endpoints", len(loaded.Endpoints))
	l.loaded(ns)
	l.handled(ns, rv)
}

// release frees the limit counters of the groups that prev served and next, now in service, does not: a deleted
// group's counters are never read again (docs/limits.md). Stores shared by replicas (Redis) expire their own.
func (l *Loader) release(prev, next *view.Namespace) {
	r, ok := l.store.(limits.Releaser)
	if !ok || prev == nil {
		return
	}
	var gone []string
	for id := range prev.Groups {
		if next.Groups[id] == nil {
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		r.Release(next.Name, gone)
	}
}

func versionOf(ns *view.Namespace) int64 {
	if ns == nil {
		return 0
	}
	return ns.Version
}

// load returns the namespace view of the snapshot in the cache, nil when there is nothing new to load.
func (l *Loader) load(ns string, cur *view.Namespace) (*view.Namespace, error) {
	cms := l.lister(ns)
	idx, err := cms.Get(snapshot.IndexName)
	if apierrors.IsNotFound(err) {
		// A deleted index is not a revocation of everything: keep serving the last good snapshot.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read snapshot index: %w", err)
	}
	format := idx.Data[snapshot.DataFormat]
	if format != snapshot.Format && format != snapshot.FormatContent {
		return nil, fmt.Errorf("index data.%s is %q, want %q or %q", snapshot.DataFormat, format, snapshot.Format, snapshot.FormatContent)
	}
	version, err := strconv.ParseInt(idx.Data[snapshot.DataVersion], 10, 64)
	if err != nil || version < 1 {
		return nil, fmt.Errorf("index data.%s is %q, want a positive integer", snapshot.DataVersion, idx.Data[snapshot.DataVersion])
	}
	checksum := idx.Data[snapshot.DataChecksum]
	if cur != nil && version <= cur.Version {
		if version == cur.Version && checksum == cur.Checksum {
			return nil, nil // already loaded; a chunk event or a resync
		}
		return nil, fmt.Errorf("index version %d is not newer than the loaded version %d", version, cur.Version)
	}
	var s *snapshot.Snapshot
	var keys []view.KeyPart
	var parts map[string]*snapshot.Snapshot
	if format == snapshot.FormatContent {
		if s, keys, parts, err = l.loadParts(ns, cms, idx.Data[snapshot.DataParts], checksum, cur); err != nil {
			return nil, fmt.Errorf("version %d: %w", version, err)
		}
	} else {
		n, err := strconv.Atoi(idx.Data[snapshot.DataChunks])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("index data.%s is %q, want a non-negative integer", snapshot.DataChunks, idx.Data[snapshot.DataChunks])
		}
		payload := idx.BinaryData[snapshot.BinaryPayload]
		if n > 0 {
			payload, err = l.assemble(cms, n, version)
			if err != nil {
				return nil, err
			}
		}
		if s, err = snapshot.Decode(payload, checksum); err != nil {
			return nil, fmt.Errorf("version %d: %w", version, err)
		}
	}
	if s.Namespace != ns {
		return nil, fmt.Errorf("version %d names namespace %q, want %q", version, s.Namespace, ns)
	}
	var built *view.Namespace
	if format == snapshot.FormatContent {
		built, err = view.BuildParts(s, keys, version, checksum, l.store, cur)
	} else {
		built, err = view.Build(s, version, checksum, l.store, cur)
	}
	if err != nil {
		return nil, fmt.Errorf("version %d is inconsistent: %w", version, err)
	}
	l.partsMu.Lock()
	l.parts[ns] = parts // nil after an inline snapshot: nothing to reuse
	l.partsMu.Unlock()
	return built, nil
}

func (l *Loader) assemble(cms listersv1.ConfigMapNamespaceLister, n int, version int64) ([]byte, error) {
	var size int
	parts := make([][]byte, n)
	for i := 1; i <= n; i++ {
		name := snapshot.ChunkName(i)
		cm, err := cms.Get(name)
		if err != nil {
			return nil, fmt.Errorf("chunk %s of version %d is missing: %w", name, version, err)
		}
		v, err := strconv.ParseInt(cm.Data[snapshot.DataVersion], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("chunk %s data.%s is %q, want an integer", name, snapshot.DataVersion, cm.Data[snapshot.DataVersion])
		}
		if v > version {
			return nil, fmt.Errorf("%w: chunk %s has version %d, index %d", errWait, name, v, version)
		}
		if v != version {
			return nil, fmt.Errorf("chunk %s has version %d, index %d: partial snapshot", name, v, version)
		}
		parts[i-1] = cm.BinaryData[snapshot.BinaryPayload]
		size += len(parts[i-1])
	}
	payload := make([]byte, 0, size)
	for _, p := range parts {
		payload = append(payload, p...)
	}
	return payload, nil
}

// loadParts reads, verifies and merges the parts a content-addressed index lists. A part already loaded is not
// decoded again: its name is its content's hash, so equal names are equal bytes. The parts without keys (the
// head, the ranges of groups) of the last load are kept decoded, by hash; a part of keys is kept only as the
// view's compact block (cur.HasKeyPart), and comes back as a KeyPart without keys. It returns the merged
// snapshot without its keys, the key parts in order, and the decoded parts without keys by hash, for the next
// load.
func (l *Loader) loadParts(ns string, cms listersv1.ConfigMapNamespaceLister, list, checksum string, cur *view.Namespace) (*snapshot.Snapshot, []view.KeyPart, map[string]*snapshot.Snapshot, error) {
	if got := snapshot.PartsChecksum(list); got != checksum {
		return nil, nil, nil, fmt.Errorf("%w: index says %s, its part list hashes to %s", snapshot.ErrChecksum, checksum, got)
	}
	hashes, err := snapshot.ParsePartList(list)
	if err != nil {
		return nil, nil, nil, err
	}
	l.partsMu.Lock()
	cached := l.parts[ns]
	l.partsMu.Unlock()
	// Read every part that is neither kept decoded nor a block of the view being served, and decode them in
	// parallel: at a start, that is every part.
	var todo []int
	var todoHashes []string
	var payloads [][]byte
	for i, h := range hashes {
		if _, ok := cached[h]; ok || (i > 0 && cur != nil && cur.HasKeyPart(h)) {
			continue
		}
		name := snapshot.PartName(h)
		cm, err := cms.Get(name)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("part %s is missing: %w", name, err)
		}
		todo = append(todo, i)
		todoHashes = append(todoHashes, h)
		payloads = append(payloads, cm.BinaryData[snapshot.BinaryPayload])
	}
	done, err := DecodeParts(todoHashes, payloads)
	if err != nil {
		return nil, nil, nil, err
	}
	fresh := make([]DecodedPart, len(hashes))
	for j, i := range todo {
		fresh[i] = done[j]
	}

	decoded := map[string]*snapshot.Snapshot{}
	var head *snapshot.Snapshot
	var groups [][]snapshot.Group
	var keys []view.KeyPart
	n := 0
	for i, h := range hashes {
		part := fresh[i]
		if part.Snapshot == nil {
			var ok bool
			if part.Snapshot, ok = cached[h]; !ok {
				keys = append(keys, view.KeyPart{Hash: h}) // a block of the view being served
				continue
			}
		}
		p := part.Snapshot
		switch {
		case i == 0 && part.Keys != nil:
			return nil, nil, nil, errors.New("the first part is not a head: it carries keys")
		case i == 0 && len(p.Groups) > 0:
			return nil, nil, nil, errors.New("the first part is not a head: it carries groups")
		case i == 0:
			head = p
			decoded[h] = p
			continue
		case p.Namespace != head.Namespace:
			return nil, nil, nil, fmt.Errorf("part %d names namespace %q, the head %q", i, p.Namespace, head.Namespace)
		case part.Keys != nil:
			keys = append(keys, *part.Keys) // a part of keys lives on in the view only
			continue
		}
		decoded[h] = p
		groups = append(groups, p.Groups)
		n += len(p.Groups)
	}
	s := *head
	if n > 0 {
		s.Groups = make([]snapshot.Group, 0, n)
		for _, g := range groups {
			s.Groups = append(s.Groups, g...)
		}
	}
	return &s, keys, decoded, nil
}

// DecodedPart is one part as a gatewayd keeps it: a part of keys as the view's compact block (Keys) beside a
// Snapshot that carries only its namespace, any other part as its decoded Snapshot.
type DecodedPart struct {
	Snapshot *snapshot.Snapshot
	Keys     *view.KeyPart
}

// DecodeParts verifies and decodes payloads, the parts named by hashes, on every core: what a gatewayd does at a
// start with all of a workspace's parts, and with the new ones at a change. The keys of a part go into the view's
// compact form as they are parsed, so no decoded record of a key is ever allocated.
func DecodeParts(hashes []string, payloads [][]byte) ([]DecodedPart, error) {
	if len(hashes) != len(payloads) {
		return nil, fmt.Errorf("%d part names for %d payloads", len(hashes), len(payloads))
	}
	out := make([]DecodedPart, len(hashes))
	var eg errgroup.Group
	eg.SetLimit(runtime.GOMAXPROCS(0))
	for i := range hashes {
		eg.Go(func() error {
			kb := view.NewKeyPartBuilder(hashes[i])
			p, err := snapshot.DecodePartKeys(payloads[i], hashes[i], kb.Add)
			if err != nil {
				return err
			}
			if kb.Len() == 0 {
				out[i].Snapshot = p
				return nil
			}
			if len(p.Groups) > 0 {
				return fmt.Errorf("part %s carries keys and groups", hashes[i])
			}
			kp := kb.Part()
			out[i] = DecodedPart{Snapshot: &snapshot.Snapshot{Namespace: p.Namespace}, Keys: &kp}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
