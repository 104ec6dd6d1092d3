package controllers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
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

func (r *SnapshotReconciler) setup(mgr ctrl.Manager, opts controller.Options) error {
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

// publish writes the chunks first and the index last, so a reader never sees an index whose chunks are not
// all written; it updates index in place with the data of the new version.
func (r *SnapshotReconciler) publish(ctx context.Context, ns string, index *corev1.ConfigMap, exists bool, version int64,
	payload []byte, checksum string, chunks [][]byte) error {
	v := strconv.FormatInt(version, 10)
	for i, chunk := range chunks {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: snapshot.ChunkName(i + 1),
				Labels: map[string]string{snapshot.LabelKey: snapshot.LabelChunk}},
			Data:       map[string]string{snapshot.DataVersion: v},
			BinaryData: map[string][]byte{snapshot.BinaryPayload: chunk},
		}
		if err := r.upsert(ctx, cm); err != nil {
			return err
		}
	}
	if index.Labels == nil {
		index.Labels = map[string]string{}
	}
	index.Namespace, index.Name = ns, snapshot.IndexName
	index.Labels[snapshot.LabelKey] = snapshot.LabelIndex
	index.Data = map[string]string{
		snapshot.DataVersion:  v,
		snapshot.DataChecksum: checksum,
		snapshot.DataChunks:   strconv.Itoa(len(chunks)),
		snapshot.DataFormat:   snapshot.Format,
	}
	index.BinaryData = nil
	if len(chunks) == 0 {
		index.BinaryData = map[string][]byte{snapshot.BinaryPayload: payload}
	}
	if !exists {
		if err := r.Create(ctx, index); err != nil {
			return fmt.Errorf("failed to create ConfigMap %s: %w", snapshot.IndexName, err)
		}
		return nil
	}
	// index carries the resourceVersion it was read with: a concurrent writer makes this fail and retry.
	if err := r.Update(ctx, index); err != nil {
		return fmt.Errorf("failed to update ConfigMap %s: %w", snapshot.IndexName, err)
	}
	return nil
}

// upsert creates cm or replaces the data and labels of the existing ConfigMap of that name.
func (r *SnapshotReconciler) upsert(ctx context.Context, cm *corev1.ConfigMap) error {
	err := r.Create(ctx, cm)
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("failed to create ConfigMap %s: %w", cm.Name, err)
		}
		return nil
	}
	existing := &corev1.ConfigMap{}
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(cm), existing); err != nil {
		return fmt.Errorf("failed to read ConfigMap %s: %w", cm.Name, err)
	}
	existing.Labels, existing.Data, existing.BinaryData = cm.Labels, cm.Data, cm.BinaryData
	if err := r.Update(ctx, existing); err != nil {
		return fmt.Errorf("failed to update ConfigMap %s: %w", cm.Name, err)
	}
	return nil
}

// deleteStaleChunks deletes every chunk ConfigMap of ns that the index does not name: numbered chunks past its
// count, numbered chunks under a content-addressed index, and parts it no longer lists. It runs after the index
// moved: gatewayd reads the index and its parts from an informer cache, which receives the index's update
// before these deletions, so it never looks for a part deleted here.
func (r *SnapshotReconciler) deleteStaleChunks(ctx context.Context, ns string, index *corev1.ConfigMap) error {
	keep := map[string]bool{}
	for _, h := range strings.Split(index.Data[snapshot.DataParts], "\n") {
		if h != "" {
			keep[snapshot.PartName(h)] = true
		}
	}
	numbered := 0
	if index.Data[snapshot.DataFormat] == snapshot.Format {
		numbered, _ = strconv.Atoi(index.Data[snapshot.DataChunks])
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := r.Reader.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{snapshot.LabelKey: snapshot.LabelChunk}); err != nil {
		return fmt.Errorf("failed to list snapshot chunks of %s: %w", ns, err)
	}
	for i := range list.Items {
		m := &list.Items[i]
		if keep[m.Name] {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(m.Name, snapshot.IndexName+"-")); err == nil && n >= 1 && n <= numbered {
			continue
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.Name}}
		if err := r.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to delete stale snapshot chunk %s/%s: %w", ns, m.Name, err)
		}
	}
	return nil
}

// recordVersion writes the published version into status.snapshotVersion of the namespace's Workspaces.
func (r *SnapshotReconciler) recordVersion(ctx context.Context, workspaces []gatewayv1.Workspace, version int64) error {
	for i := range workspaces {
		ws := &workspaces[i]
		if ws.Status.SnapshotVersion == version || !ws.DeletionTimestamp.IsZero() {
			continue
		}
		patch := []byte(fmt.Sprintf(`{"status":{"snapshotVersion":%d}}`, version))
		target := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ws.Namespace, Name: ws.Name}}
		if err := r.Status().Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to record snapshot version in Workspace %s/%s: %w", ws.Namespace, ws.Name, err)
		}
	}
	return nil
}

// nextVersion is the version after prev: at least prev+1, and at least the current Unix time in milliseconds, so
// versions keep growing even when the index ConfigMap is deleted by hand and its stored version lost. gatewayd
// refuses any version that is not greater than the one it serves, so a restart from 1 would freeze it.
func nextVersion(prev int64, now time.Time) int64 {
	return max(prev+1, now.UnixMilli())
}

// encoded is a snapshot ready to publish: inline (payload) or content-addressed (parts).
type encoded struct {
	format, checksum string
	payload          []byte
	parts            []snapshot.Part
}

func (e encoded) size() int {
	n := len(e.payload)
	for _, p := range e.parts {
		n += len(p.Payload)
	}
	return n
}

// partsAbove is the item count past which the reconciler goes straight to the content-addressed layout, without
// first encoding the whole snapshot to see whether it fits in one ConfigMap: a few thousand groups and keys
// encode to well under MaxChunkBytes, so below it the inline try is cheap and usually fits.
const partsAbove = 4096

// encode chooses the layout: inline when the payload fits in one ConfigMap, content-addressed parts otherwise,
// so that a change rewrites only the parts it touches. snap is tr's last pass, whose memory of its parts lets it
// re-encode only the ranges the change touched.
func (r *SnapshotReconciler) encode(snap *snapshot.Snapshot, tr *translate.Translator) (encoded, error) {
	if len(snap.Groups)+len(snap.APIKeys) <= partsAbove {
		payload, checksum, err := snapshot.Encode(snap)
		if err != nil {
			return encoded{}, err
		}
		if len(payload) <= r.ChunkBytes {
			// Inline again: the memory of this workspace's parts is of no further use.
			tr.ForgetParts()
			return encoded{format: snapshot.Format, checksum: checksum, payload: payload}, nil
		}
	}
	parts, checksum, err := tr.EncodeParts(snap, r.ChunkBytes)
	if err != nil {
		return encoded{}, err
	}
	return encoded{format: snapshot.FormatContent, checksum: checksum, parts: parts}, nil
}

// publishParts creates the parts that do not exist yet (a part's name is its content's hash, so one that exists
// holds these very bytes), then points the index at the list. It returns how many parts and bytes it wrote.
func (r *SnapshotReconciler) publishParts(ctx context.Context, ns string, index *corev1.ConfigMap, exists bool, version int64,
	enc encoded) (written, bytes int, err error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := r.Reader.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{snapshot.LabelKey: snapshot.LabelChunk}); err != nil {
		return 0, 0, fmt.Errorf("failed to list snapshot chunks of %s: %w", ns, err)
	}
	have := map[string]bool{}
	for i := range list.Items {
		have[list.Items[i].Name] = true
	}
	for _, p := range enc.parts {
		name := snapshot.PartName(p.Hash)
		if have[name] {
			continue
		}
		have[name] = true
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				Labels: map[string]string{snapshot.LabelKey: snapshot.LabelChunk}},
			Immutable:  ptr.To(true),
			BinaryData: map[string][]byte{snapshot.BinaryPayload: p.Payload},
		}
		if err := r.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return written, bytes, fmt.Errorf("failed to create ConfigMap %s: %w", name, err)
		}
		written++
		bytes += len(p.Payload)
	}
	if index.Labels == nil {
		index.Labels = map[string]string{}
	}
	index.Namespace, index.Name = ns, snapshot.IndexName
	index.Labels[snapshot.LabelKey] = snapshot.LabelIndex
	parts := snapshot.PartList(enc.parts)
	index.Data = map[string]string{
		snapshot.DataVersion:  strconv.FormatInt(version, 10),
		snapshot.DataChecksum: enc.checksum,
		snapshot.DataChunks:   strconv.Itoa(len(enc.parts)),
		snapshot.DataFormat:   snapshot.FormatContent,
		snapshot.DataParts:    parts,
	}
	index.BinaryData = nil
	bytes += len(parts)
	if !exists {
		if err := r.Create(ctx, index); err != nil {
			return written, bytes, fmt.Errorf("failed to create ConfigMap %s: %w", snapshot.IndexName, err)
		}
		return written, bytes, nil
	}
	if err := r.Update(ctx, index); err != nil {
		return written, bytes, fmt.Errorf("failed to update ConfigMap %s: %w", snapshot.IndexName, err)
	}
	return written, bytes, nil
}
