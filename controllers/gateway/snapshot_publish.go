package gateway

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/translate"
)

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
