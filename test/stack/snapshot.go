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
	if f := index.Data[snapshot.DataFormat]; f != snapshot.Format {
		return nil, 0, fmt.Errorf("snapshot of %s has format %q, want %q", namespace, f, snapshot.Format)
	}
	version, err := strconv.ParseInt(index.Data[snapshot.DataVersion], 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot of %s has an invalid version: %w", namespace, err)
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
