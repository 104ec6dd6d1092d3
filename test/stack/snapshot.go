package stack

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
)

// ReadSnapshot reads and verifies the snapshot the manager published for namespace, following its chunks. It
// reads the ConfigMaps the way gatewayd does, so a test can see exactly what the data plane will load.
func ReadSnapshot(ctx context.Context, c client.Reader, namespace string) (*snapshot.Snapshot, int64, error) {
	var index corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: snapshot.IndexName}, &index); err != nil {
		return nil, 0, fmt.Errorf("failed to get snapshot index of %s: %w", namespace, err)
	}
	version, err := strconv.ParseInt(index.Data[snapshot.DataVersion], 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot of %s has an invalid version: %w", namespace, err)
	}
	if index.Data[snapshot.DataFormat] == snapshot.FormatContent {
		s, err := readParts(ctx, c, namespace, &index)
		return s, version, err
	}
	if f := index.Data[snapshot.DataFormat]; f != snapshot.Format {
		return nil, 0, fmt.Errorf("snapshot of %s has format %q, want %q", namespace, f, snapshot.Format)
	}
	chunks, err := strconv.Atoi(index.Data[snapshot.DataChunks])
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot of %s has an invalid chunk count: %w", namespace, err)
	}
	payload := append([]byte(nil), index.BinaryData[snapshot.BinaryPayload]...)
	for i := 1; i <= chunks; i++ {
		var chunk corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: snapshot.ChunkName(i)}, &chunk); err != nil {
			return nil, 0, fmt.Errorf("failed to get snapshot chunk %d of %s: %w", i, namespace, err)
		}
		if chunk.Data[snapshot.DataVersion] != index.Data[snapshot.DataVersion] {
			return nil, 0, fmt.Errorf("snapshot chunk %d of %s is from version %s, index is %d: a write is in flight",
				i, namespace, chunk.Data[snapshot.DataVersion], version)
		}
		payload = append(payload, chunk.BinaryData[snapshot.BinaryPayload]...)
	}
	s, err := snapshot.Decode(payload, index.Data[snapshot.DataChecksum])
	if err != nil {
		return nil, 0, fmt.Errorf("failed to decode snapshot version %d of %s: %w", version, namespace, err)
	}
	return s, version, nil
}

// readParts reads the content-addressed layout: every part the index lists, verified against its name.
func readParts(ctx context.Context, c client.Reader, namespace string, index *corev1.ConfigMap) (*snapshot.Snapshot, error) {
	list := index.Data[snapshot.DataParts]
	if snapshot.PartsChecksum(list) != index.Data[snapshot.DataChecksum] {
		return nil, fmt.Errorf("snapshot of %s: the part list does not match the checksum", namespace)
	}
	hashes, err := snapshot.ParsePartList(list)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", namespace, err)
	}
	parts := make([]*snapshot.Snapshot, len(hashes))
	for i, h := range hashes {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: snapshot.PartName(h)}, &cm); err != nil {
			return nil, fmt.Errorf("failed to get snapshot part %s of %s: %w", h, namespace, err)
		}
		if parts[i], err = snapshot.DecodePart(cm.BinaryData[snapshot.BinaryPayload], h); err != nil {
			return nil, fmt.Errorf("snapshot of %s: %w", namespace, err)
		}
	}
	return snapshot.Merge(parts)
}
