// Package gatewaytest helps tests drive a real gatewayd: it starts envtest (kube-apiserver and etcd with the
// modelgate CRDs), builds snapshots from a compact group tree with the same hierarchy resolver the manager
// uses, publishes them as the snapshot ConfigMaps (chunked or inline, per the api/snapshot layout) so they go
// through gatewayd's real watch path, and serves a Gateway on a loopback port.
package gatewaytest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/modelgate/modelgate/api/apikey"
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
	"github.com/modelgate/modelgate/gatewayd"
)

// Group is one group of a test tree. Parent is "" for a root.
type Group struct {
	ID, Parent string
	Models     []gatewayv1.ModelConfig
}

// Snapshot resolves groups (all in one mode) with hierarchy.Resolve, exactly as the manager does, and
// returns the snapshot of namespace ns. External entity ids are "ext-" + ID.
func Snapshot(ns string, mode gatewayv1.LimitEnforcement, groups []Group) *snapshot.Snapshot {
	objs := make([]*gatewayv1.Group, 0, len(groups))
	for _, g := range groups {
		obj := &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Name: g.ID, Namespace: ns}}
		obj.Spec.ExternalEntityID = "ext-" + g.ID
		obj.Spec.Models = g.Models
		obj.Spec.Hierarchy.LimitEnforcement = mode
		if g.Parent != "" {
			p := g.Parent
			obj.Spec.Hierarchy.ParentGroupID = &p
		}
		objs = append(objs, obj)
	}
	ix := hierarchy.NewIndex(objs)
	s := &snapshot.Snapshot{Namespace: ns}
	for _, obj := range objs {
		chain, _ := ix.Chain(obj)
		s.Groups = append(s.Groups, snapshot.Group{ID: obj.Name, ExternalEntityID: obj.Spec.ExternalEntityID, ParentID: obj.ParentID(),
			Mode: string(mode), Depth: len(chain), Models: hierarchy.SnapshotModels(chain)})
	}
	return s
}

// NewKey mints a federated key of group groupID in the product's format and returns its plaintext and its
// snapshot record (prefix and hash only).
func NewKey(id, groupID string) (string, snapshot.APIKey) {
	key := mustMint(apikey.Federated)
	return key, snapshot.APIKey{ID: id, Prefix: apikey.Prefix(key), Hash: apikey.Hash(key), GroupID: groupID}
}

// NewWorkspaceKey mints a workspace key of the given type.
func NewWorkspaceKey(id, typ string) (string, snapshot.WorkspaceAPIKey) {
	key := mustMint(apikey.Workspace)
	return key, snapshot.WorkspaceAPIKey{ID: id, Prefix: apikey.Prefix(key), Hash: apikey.Hash(key), Type: typ}
}

// mustMint mints a key of kind; crypto/rand failing is not a test condition.
func mustMint(kind string) string {
	key, err := apikey.Mint(kind)
	if err != nil {
		panic(err)
	}
	return key
}

// Publish encodes s and writes it as version. Payloads larger than chunkBytes (when > 0) are chunked.
func Publish(ctx context.Context, cs kubernetes.Interface, s *snapshot.Snapshot, version int64, chunkBytes int) error {
	payload, sum, err := snapshot.Encode(s)
	if err != nil {
		return err
	}
	return PublishPayload(ctx, cs, s.Namespace, version, sum, payload, chunkBytes)
}

// PublishPayload writes raw bytes under an index claiming version and checksum, so tests can publish corrupt
// snapshots. Chunks are written before the index, as the manager does.
func PublishPayload(ctx context.Context, cs kubernetes.Interface, ns string, version int64, checksum string, payload []byte, chunkBytes int) error {
	if chunkBytes <= 0 {
		chunkBytes = snapshot.MaxChunkBytes
	}
	chunks := snapshot.Split(payload, chunkBytes)
	v := strconv.FormatInt(version, 10)
	for i, c := range chunks {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: snapshot.ChunkName(i + 1), Namespace: ns,
				Labels: map[string]string{snapshot.LabelKey: snapshot.LabelChunk}},
			Data:       map[string]string{snapshot.DataVersion: v},
			BinaryData: map[string][]byte{snapshot.BinaryPayload: c},
		}
		if err := apply(ctx, cs, cm); err != nil {
			return err
		}
	}
	idx := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: snapshot.IndexName, Namespace: ns,
			Labels: map[string]string{snapshot.LabelKey: snapshot.LabelIndex}},
		Data: map[string]string{snapshot.DataVersion: v, snapshot.DataChecksum: checksum,
			snapshot.DataChunks: strconv.Itoa(len(chunks)), snapshot.DataFormat: snapshot.Format},
	}
	if len(chunks) == 0 {
		idx.BinaryData = map[string][]byte{snapshot.BinaryPayload: payload}
	}
	return apply(ctx, cs, idx)
}

func apply(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
	cms := cs.CoreV1().ConfigMaps(cm.Namespace)
	_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("failed to write ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}

// CreateNamespace creates a namespace with a generated name and returns it.
func CreateNamespace(ctx context.Context, cs kubernetes.Interface, prefix string) (string, error) {
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("failed to create namespace: %w", err)
	}
	return ns.Name, nil
}

// CreateSecret writes a Secret with one entry.
func CreateSecret(ctx context.Context, cs kubernetes.Interface, ns, name, key, value string) error {
	return createSecret(ctx, cs, ns, name, key, value, nil)
}

// CreateUpstreamSecret writes a Secret with one entry, labelled as an upstream credential.
func CreateUpstreamSecret(ctx context.Context, cs kubernetes.Interface, ns, name, key, value string) error {
	return createSecret(ctx, cs, ns, name, key, value, map[string]string{gatewayv1.LabelUpstreamCredential: "true"})
}

func createSecret(ctx context.Context, cs kubernetes.Interface, ns, name, key, value string, labels map[string]string) error {
	_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Data:       map[string][]byte{key: []byte(value)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("failed to create Secret %s/%s: %w", ns, name, err)
	}
	return nil
}

// Serve runs g on a loopback port until ctx is done and returns its base URL.
func Serve(ctx context.Context, g *gatewayd.Gateway) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("failed to listen: %w", err)
	}
	go func() { _ = g.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), nil
}

// Start runs g on ln until ctx is done or stop is called, and waits until g is ready, or fails after timeout
// (having stopped it). stop ends Serve and waits for it to return.
func Start(ctx context.Context, g *gatewayd.Gateway, ln net.Listener, timeout time.Duration) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(ctx, ln)
	}()
	stop = func() {
		cancel()
		<-done
	}
	if err := WaitReady(g, timeout); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// WaitVersion waits until g serves version of ns, or fails after timeout.
func WaitVersion(g *gatewayd.Gateway, ns string, version int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if n := g.View().Namespace(ns); n != nil && n.Version == version {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	n := g.View().Namespace(ns)
	if n == nil {
		return fmt.Errorf("namespace %s never loaded, want version %d", ns, version)
	}
	return fmt.Errorf("namespace %s serves version %d, want %d", ns, n.Version, version)
}

// WaitReady waits for g to be ready.
func WaitReady(g *gatewayd.Gateway, timeout time.Duration) error {
	select {
	case <-g.Ready():
		return nil
	case <-time.After(timeout):
		return errors.New("gateway not ready in time")
	}
}

// ServeSnapshot publishes s as version 1 of its namespace, runs a gatewayd that serves that namespace through the
// API server of cfg on a loopback port until ctx is done, and returns its base URL once it is ready: the gateway
// of a client test.
func ServeSnapshot(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, s *snapshot.Snapshot) (string, error) {
	if err := Publish(ctx, cs, s, 1, 0); err != nil {
		return "", err
	}
	gw, err := gatewayd.New(gatewayd.Options{RESTConfig: cfg, Namespaces: []string{s.Namespace}})
	if err != nil {
		return "", err
	}
	url, err := Serve(ctx, gw)
	if err != nil {
		return "", err
	}
	return url, WaitReady(gw, 30*time.Second)
}
