// Package discovery owns where gatewayd finds the pods of a service deployment: it watches the EndpointSlices of
// the Services in the served namespaces (as Envoy Gateway and Contour do), keeps each Service's ready addresses per
// port as an immutable list that it swaps atomically, and owns the in-flight counts by which Pick chooses an address
// by power of two choices. gatewayd then calls the pod itself, with no kube-proxy hop.
package discovery

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// serviceIndex indexes EndpointSlices by "namespace/service" of the Service they belong to.
const serviceIndex = "service"

// serviceKey names a Service.
type serviceKey struct{ namespace, name string }

// Watcher keeps the ready addresses of the Services' EndpointSlices in the served namespaces.
type Watcher struct {
	client     kubernetes.Interface
	namespaces []string

	// services maps each Service to its immutable address sets. Writers copy the map under mu and swap it in, so
	// that Pick reads it with one atomic load.
	services atomic.Pointer[map[serviceKey]*service]
	mu       sync.Mutex

	synced chan struct{}
	// changed is closed and replaced on every change of an address set, so waiters wake without polling.
	changed atomic.Pointer[chan struct{}]
}

// New returns a Watcher of the EndpointSlices in namespaces (empty means all namespaces). Call Run to start it.
func New(cs kubernetes.Interface, namespaces []string) *Watcher {
	w := &Watcher{client: cs, namespaces: namespaces, synced: make(chan struct{})}
	empty := map[serviceKey]*service{}
	w.services.Store(&empty)
	changed := make(chan struct{})
	w.changed.Store(&changed)
	return w
}

// Synced returns a channel that is closed once the informers have synced and their first events are applied.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Changed returns a channel that is closed at the next change of any Service's address set. Take it, then check
// what you wait for, then wait on it, so that no change slips between the check and the wait.
func (w *Watcher) Changed() <-chan struct{} { return *w.changed.Load() }

// Run starts one informer per served namespace (or one cluster-wide) and blocks until ctx is done. Call it once.
func (w *Watcher) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("discovery")
	ctx, cancel := context.WithCancel(ctx)
	var factories []informers.SharedInformerFactory
	defer func() {
		// Shutdown waits for the informers' goroutines, which stop only once ctx is cancelled.
		cancel()
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	namespaces := w.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var synced []cache.InformerSynced
	for _, ns := range namespaces {
		f, hasSynced, err := w.informer(log, ns)
		if err != nil {
			return err
		}
		factories = append(factories, f)
		synced = append(synced, hasSynced)
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("failed to sync EndpointSlices: %w", ctx.Err())
	}
	close(w.synced)
	log.Info("Watching EndpointSlices", "namespaces", w.namespaces, "services", len(*w.services.Load()))
	<-ctx.Done()
	return nil
}

// informer sets up the EndpointSlice informer of ns ("" for all namespaces) without starting it. The returned
// function reports when its handler has received the initial list.
func (w *Watcher) informer(log logr.Logger, ns string) (informers.SharedInformerFactory, cache.InformerSynced, error) {
	onlyServices := func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName }
	f := informers.NewSharedInformerFactoryWithOptions(w.client, 0,
		informers.WithNamespace(ns), informers.WithTweakListOptions(onlyServices))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	if err := inf.SetTransform(stripManagedFields); err != nil {
		return nil, nil, fmt.Errorf("failed to set the EndpointSlice transform in %q: %w", ns, err)
	}
	if err := inf.AddIndexers(cache.Indexers{serviceIndex: indexByService}); err != nil {
		return nil, nil, fmt.Errorf("failed to index EndpointSlices in %q: %w", ns, err)
	}
	reg, err := inf.AddEventHandler(w.handler(log, inf.GetIndexer()))
	if err != nil {
		return nil, nil, fmt.Errorf("failed to watch EndpointSlices in %q: %w", ns, err)
	}
	return f, reg.HasSynced, nil
}

// stripManagedFields drops what the watcher never reads, to keep the informer cache small.
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

func indexByService(obj any) ([]string, error) {
	key, ok := keyOf(obj)
	if !ok {
		return nil, nil
	}
	return []string{key.namespace + "/" + key.name}, nil
}

// keyOf returns the Service an EndpointSlice belongs to, by its kubernetes.io/service-name label.
func keyOf(obj any) (serviceKey, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return serviceKey{}, false
	}
	return serviceKey{namespace: s.Namespace, name: s.Labels[discoveryv1.LabelServiceName]}, true
}

// handler rebuilds the Service of every changed slice from what the informer's indexer holds. It is level
// based: each event reads all current slices of the Service, so it does not matter which event it was.
func (w *Watcher) handler(log logr.Logger, idx cache.Indexer) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.rebuild(log, idx, obj) },
		UpdateFunc: func(old, obj any) {
			// A relabelled slice leaves its old Service.
			if before, ok := keyOf(old); ok {
				if after, _ := keyOf(obj); after != before {
					w.rebuild(log, idx, old)
				}
			}
			w.rebuild(log, idx, obj)
		},
		DeleteFunc: func(obj any) { w.rebuild(log, idx, obj) },
	}
}

func (w *Watcher) rebuild(log logr.Logger, idx cache.Indexer, obj any) {
	key, ok := keyOf(obj)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Read the slices under mu, so that the last writer has read the latest state.
	objs, err := idx.ByIndex(serviceIndex, key.namespace+"/"+key.name)
	if err != nil {
		log.Error(err, "Failed to list EndpointSlices", "namespace", key.namespace, "service", key.name)
		return
	}
	slices := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			slices = append(slices, s)
		}
	}
	w.updateLocked(log, key, slices)
}

// update replaces the address sets of key with those of slices.
func (w *Watcher) update(log logr.Logger, key serviceKey, slices []*discoveryv1.EndpointSlice) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.updateLocked(log, key, slices)
}

func (w *Watcher) updateLocked(log logr.Logger, key serviceKey, slices []*discoveryv1.EndpointSlice) {
	old := (*w.services.Load())[key]
	next := build(old, slices)
	if next.equal(old) {
		return
	}
	w.publishLocked(key, next)
	log.V(1).Info("Service addresses changed", "namespace", key.namespace, "service", key.name, "ready", next.count())
}

// publishLocked swaps in a copy of the services with key set to s (removed when s is nil) and wakes the waiters.
func (w *Watcher) publishLocked(key serviceKey, s *service) {
	cur := *w.services.Load()
	next := make(map[serviceKey]*service, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	if s == nil {
		delete(next, key)
	} else {
		next[key] = s
	}
	w.services.Store(&next)
	ch := make(chan struct{})
	close(*w.changed.Swap(&ch))
}
