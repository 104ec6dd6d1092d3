package gateway

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// SnapshotReconciler is the materializer: whatever changes in a workspace, it brings the workspace's snapshot up
// to date with a translate.Translator (the result of translate.Translate, re-judging only what the change can
// reach) and publishes it when the bytes changed. Every event of a namespace maps to
// the one request {namespace, snapshot.IndexName}, so bursts coalesce and two passes over one workspace never
// run at once.
type SnapshotReconciler struct {
	// Client reads the custom resources from the cache and writes ConfigMaps and Workspace status.
	client.Client
	// Reader reads the snapshot ConfigMaps past the cache: the previous version must be the stored one, even
	// right after a restart, and caching every ConfigMap of the cluster is not worth it.
	Reader client.Reader
	// ChunkBytes caps the payload of one ConfigMap.
	ChunkBytes int

	// translators keeps a translate.Translator per workspace namespace, so a pass re-translates only the groups
	// and keys that a change can reach and re-encodes only the ranges they fall in. It starts empty (a full pass)
	// after a restart. Reconciles of one namespace never run at once (one constant key each).
	translators sync.Map
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *SnapshotReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	enqueue := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: snapshot.IndexName}}}
	})
	// Translate reads the status of keys (their derived prefix and hash) but not of Workspaces, Groups or
	// Endpoints, so the status writes of those reconcilers (this one's included, on the Workspace) do not start
	// another pass over the whole workspace. At 10,000 groups a pass costs a few hundred milliseconds of CPU that
	// the pass publishing the change, and gatewayd loading it, would otherwise share.
	specOnly := builder.WithPredicates(kit.SpecOrLifecycleChanged)
	return ctrl.NewControllerManagedBy(mgr).
		Named("snapshot").
		Watches(&gatewayv1.Workspace{}, enqueue, specOnly).
		Watches(&gatewayv1.Group{}, enqueue, specOnly).
		Watches(&gatewayv1.APIKey{}, enqueue).
		Watches(&gatewayv1.WorkspaceAPIKey{}, enqueue).
		Watches(&gatewayv1.Endpoint{}, enqueue, specOnly).
		Watches(&gatewayv1.Model{}, enqueue, specOnly).
		Watches(&gatewayv1.Team{}, enqueue, specOnly).
		Watches(&gatewayv1.Chain{}, enqueue, specOnly).
		Watches(&gatewayv1.ChainDeployment{}, enqueue, specOnly).
		// A deployment's status decides whether a url deployment is served and which port a service one uses.
		Watches(&gatewayv1.ModelDeployment{}, enqueue, builder.WithPredicates(routingChanged)).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

// routingChanged passes what kit.SpecOrLifecycleChanged passes, and ModelDeployment status writes that change what
// the snapshot says of it (its status or resolved port), but not those that only move a replica count or a
// condition's message.
var routingChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if kit.SpecOrLifecycleChanged.Update(e) {
			return true
		}
		o, ok1 := e.ObjectOld.(*gatewayv1.ModelDeployment)
		n, ok2 := e.ObjectNew.(*gatewayv1.ModelDeployment)
		return !ok1 || !ok2 || o.Status.Status != n.Status.Status || o.Status.PortName != n.Status.PortName
	},
}

// Reconcile materializes the snapshot of the namespace req.Namespace.
func (r *SnapshotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	in, err := r.gather(ctx, ns)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to materialize snapshot for workspace %s: %w", ns, err)
	}
	snap, translator := r.translateWorkspace(in)
	enc, err := r.encode(snap, translator)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to materialize snapshot for workspace %s: %w", ns, err)
	}

	index := &corev1.ConfigMap{}
	err = r.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: snapshot.IndexName}, index)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("failed to read snapshot index of %s: %w", ns, err)
	}
	exists := err == nil
	version, _ := strconv.ParseInt(index.Data[snapshot.DataVersion], 10, 64)
	if !exists || index.Data[snapshot.DataChecksum] != enc.checksum || index.Data[snapshot.DataFormat] != enc.format {
		version = nextVersion(version, time.Now())
		var written, bytes int
		if enc.parts != nil {
			written, bytes, err = r.publishParts(ctx, ns, index, exists, version, enc)
		} else {
			written, bytes = 1, len(enc.payload)
			err = r.publish(ctx, ns, index, exists, version, enc.payload, enc.checksum, nil)
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to publish snapshot %d of %s: %w", version, ns, err)
		}
		logf.FromContext(ctx).Info("Published snapshot", "version", version,
			"groups", len(snap.Groups), "apiKeys", len(snap.APIKeys), "workspaceAPIKeys", len(snap.WorkspaceAPIKeys),
			"endpoints", len(snap.Endpoints), "bytes", enc.size(), "parts", len(enc.parts), "partsWritten", written, "bytesWritten", bytes,
			"groupsJudged", translator.Judged, "keysChecked", translator.Checked)
	}
	// Also after a restart with nothing new to publish: stale chunks of an interrupted pass go, and a Workspace
	// that missed its version catches up.
	if err := r.deleteStaleChunks(ctx, ns, index); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.recordVersion(ctx, in.Workspaces, version)
}

// gather lists everything of the namespace that the snapshot depends on, from the cache, without copies:
// translation only reads, and keeps no object past the pass.
func (r *SnapshotReconciler) gather(ctx context.Context, ns string) (translate.Input, error) {
	opts := []client.ListOption{client.InNamespace(ns), kit.UnsafeNoCopy}
	var (
		ws     gatewayv1.WorkspaceList
		groups gatewayv1.GroupList
		keys   gatewayv1.APIKeyList
		wkeys  gatewayv1.WorkspaceAPIKeyList
		eps    gatewayv1.EndpointList
		models gatewayv1.ModelList
		deps   gatewayv1.ModelDeploymentList
		teams  gatewayv1.TeamList
		chains gatewayv1.ChainList
		cdeps  gatewayv1.ChainDeploymentList
	)
	for _, l := range []client.ObjectList{&ws, &groups, &keys, &wkeys, &eps, &models, &deps, &teams, &chains, &cdeps} {
		if err := r.List(ctx, l, opts...); err != nil {
			return translate.Input{}, fmt.Errorf("failed to list %T: %w", l, err)
		}
	}
	return translate.Input{
		Namespace: ns, Workspaces: ws.Items, Groups: groups.Items, APIKeys: keys.Items,
		WorkspaceAPIKeys: wkeys.Items, Endpoints: eps.Items, Models: models.Items, ModelDeployments: deps.Items,
		Teams: teams.Items, Chains: chains.Items, ChainDeployments: cdeps.Items,
	}, nil
}

// translateWorkspace translates in with the namespace's Translator. The memory of a workspace without groups or
// keys is dropped, so a deleted workspace leaves none behind.
func (r *SnapshotReconciler) translateWorkspace(in translate.Input) (*snapshot.Snapshot, *translate.Translator) {
	if len(in.Groups)+len(in.APIKeys)+len(in.WorkspaceAPIKeys) == 0 {
		r.translators.Delete(in.Namespace)
		tr := &translate.Translator{}
		return tr.Translate(in), tr
	}
	tr, _ := r.translators.LoadOrStore(in.Namespace, &translate.Translator{})
	translator := tr.(*translate.Translator)
	return translator.Translate(in), translator
}
