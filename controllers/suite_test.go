package controllers_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/test/jaegertest"
	"github.com/modelgate/modelgate/test/kubetest"
)

// The suite runs the reconcilers in a manager against a real kube-apiserver and etcd (envtest), with the
// generated CRDs and no webhooks, so everything the reconcilers rely on (CEL defaults, status subresources,
// finalizers, field indexes) is the real thing. envtest has no garbage collector: cascading deletion must work
// without one.

var (
	k8s client.Client
	ctx context.Context
	// restConfig reaches the API server, for a real gatewayd that loads the published snapshots.
	restConfig *rest.Config
	// kubectl runs envtest's kubectl against the API server, for what an operator sees (printer columns).
	kubectl func(args ...string) (stdout, stderr io.Reader, err error)
	// jaeger receives the manager's spans (every reconcile sampled), tracer sends them.
	jaeger *jaegertest.Jaeger
	tracer *tracing.Tracer
)

// managerService is the service name of the suite's manager in its traces.
const managerService = "modelgate-manager-suite"

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controllers Suite")
}

var _ = BeforeSuite(func() {
	env := kubetest.StartSuite(kubetest.Options{CRDs: true})
	k8s = env.Client
	restConfig = env.Config
	kubectl = env.Environment.ControlPlane.KubeCtl().Run
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)
	bin, err := jaegertest.Binary()
	Expect(err).NotTo(HaveOccurred())
	dir, err := os.MkdirTemp("", "controllers-jaeger-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	jaeger, err = jaegertest.Start(ctx, bin, dir, jaegertest.Options{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(jaeger.Stop)
	tracer, err = tracing.New(ctx, tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC, Endpoint: jaeger.OTLPGRPC,
		Sampler: "always_on", Service: managerService})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = tracer.Shutdown(context.Background()) })
	env.RunManager(ctx, func(mgr ctrl.Manager) error {
		// url sources are probed every 200 ms, so a server that stops answering shows within a few polls.
		return controllers.SetupWithManager(mgr, controllers.Options{ProbeInterval: 200 * time.Millisecond, Tracer: tracer})
	})
})

// newNamespace creates a fresh workspace for one spec, so that snapshots of different specs never mix.
func newNamespace() string {
	GinkgoHelper()
	ns, err := kubetest.NewNamespace(ctx, k8s, "ws-")
	Expect(err).NotTo(HaveOccurred())
	return ns
}

// readSnapshot reads the published snapshot of ns the way gatewayd does: index, then chunks, then checksum.
func readSnapshot(ns string) (*snapshot.Snapshot, int64, int, error) {
	var index corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: snapshot.IndexName}, &index); err != nil {
		return nil, 0, 0, err
	}
	if index.Labels[snapshot.LabelKey] == snapshot.LabelIndex && index.Data[snapshot.DataFormat] == snapshot.FormatContent {
		return readParts(ns, &index)
	}
	if index.Labels[snapshot.LabelKey] != snapshot.LabelIndex || index.Data[snapshot.DataFormat] != snapshot.Format {
		return nil, 0, 0, fmt.Errorf("index has labels %v and format %q", index.Labels, index.Data[snapshot.DataFormat])
	}
	version, err := strconv.ParseInt(index.Data[snapshot.DataVersion], 10, 64)
	if err != nil {
		return nil, 0, 0, err
	}
	n, err := strconv.Atoi(index.Data[snapshot.DataChunks])
	if err != nil {
		return nil, 0, 0, err
	}
	payload := index.BinaryData[snapshot.BinaryPayload]
	if n > 0 {
		if len(payload) != 0 {
			return nil, 0, 0, fmt.Errorf("chunked index also carries an inline payload")
		}
		for i := 1; i <= n; i++ {
			var chunk corev1.ConfigMap
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: snapshot.ChunkName(i)}, &chunk); err != nil {
				return nil, 0, 0, err
			}
			if chunk.Data[snapshot.DataVersion] != index.Data[snapshot.DataVersion] {
				return nil, 0, 0, fmt.Errorf("chunk %d has version %s, index %s", i, chunk.Data[snapshot.DataVersion], index.Data[snapshot.DataVersion])
			}
			if chunk.Labels[snapshot.LabelKey] != snapshot.LabelChunk {
				return nil, 0, 0, fmt.Errorf("chunk %d has labels %v", i, chunk.Labels)
			}
			payload = append(payload, chunk.BinaryData[snapshot.BinaryPayload]...)
		}
	}
	s, err := snapshot.Decode(payload, index.Data[snapshot.DataChecksum])
	return s, version, n, err
}

// readParts reads a content-addressed snapshot: the index's part list, each part checked against its name.
func readParts(ns string, index *corev1.ConfigMap) (*snapshot.Snapshot, int64, int, error) {
	version, err := strconv.ParseInt(index.Data[snapshot.DataVersion], 10, 64)
	if err != nil {
		return nil, 0, 0, err
	}
	list := index.Data[snapshot.DataParts]
	if snapshot.PartsChecksum(list) != index.Data[snapshot.DataChecksum] {
		return nil, 0, 0, fmt.Errorf("part list does not match the index checksum")
	}
	hashes, err := snapshot.ParsePartList(list)
	if err != nil {
		return nil, 0, 0, err
	}
	parts := make([]*snapshot.Snapshot, len(hashes))
	for i, h := range hashes {
		var cm corev1.ConfigMap
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: snapshot.PartName(h)}, &cm); err != nil {
			return nil, 0, 0, err
		}
		if cm.Labels[snapshot.LabelKey] != snapshot.LabelChunk || cm.Immutable == nil || !*cm.Immutable {
			return nil, 0, 0, fmt.Errorf("part %s has labels %v and immutable %v", h, cm.Labels, cm.Immutable)
		}
		if parts[i], err = snapshot.DecodePart(cm.BinaryData[snapshot.BinaryPayload], h); err != nil {
			return nil, 0, 0, err
		}
	}
	s, err := snapshot.Merge(parts)
	return s, version, len(hashes), err
}
