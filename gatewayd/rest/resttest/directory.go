package resttest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/keyuse"
	"github.com/modelgate/modelgate/test/kubetest"
)

// Directory is the fixture's rest.Directory: it reads the snapshot ConfigMaps of the namespaces it was told
// about through the client on every call, and polls for WaitFor. With Recorder set, it records each
// authentication through auth.Lookup.Recording, as gatewayd wires it.
type Directory struct {
	Recorder   *keyuse.Recorder
	c          client.Reader
	mu         sync.Mutex
	namespaces []string
}

// NewDirectory returns a Directory that reads through c.
func NewDirectory(c client.Reader) *Directory { return &Directory{c: c} }

// Add makes the directory read the snapshot of namespace ns too.
func (d *Directory) Add(ns string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.namespaces = append(d.namespaces, ns)
}

// WorkspaceKey authenticates key, recording the use when Recorder is set.
func (d *Directory) WorkspaceKey(key string) (auth.Caller, bool) {
	if d.Recorder != nil {
		return auth.Lookup(d.Lookup).Recording(d.Recorder)(key)
	}
	return d.Lookup(key)
}

// Lookup finds key in the current snapshot of each namespace, and computes its caller from that snapshot.
func (d *Directory) Lookup(key string) (auth.Caller, bool) {
	if len(key) < 16 {
		return auth.Caller{}, false
	}
	d.mu.Lock()
	namespaces := append([]string(nil), d.namespaces...)
	d.mu.Unlock()
	sum := sha256.Sum256([]byte(key))
	for _, ns := range namespaces {
		s, err := ReadSnapshot(context.Background(), d.c, ns)
		if err != nil {
			continue
		}
		for _, k := range s.WorkspaceAPIKeys {
			want, err := hex.DecodeString(k.Hash)
			if err == nil && k.Prefix == key[:16] && subtle.ConstantTimeCompare(want, sum[:]) == 1 {
				return auth.NewCaller(ns, k, s), true
			}
		}
	}
	return auth.Caller{}, false
}

// WaitFor polls the snapshot of ns until pred holds or ctx ends.
func (d *Directory) WaitFor(ctx context.Context, ns string, pred func(*snapshot.Snapshot) bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if s, err := ReadSnapshot(ctx, d.c, ns); err == nil && pred(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// HasAPIKey reports whether the current snapshot of ns holds the API key with that prefix.
func (d *Directory) HasAPIKey(ns, prefix string) bool {
	s, err := ReadSnapshot(context.Background(), d.c, ns)
	return err == nil && slices.ContainsFunc(s.APIKeys, func(k snapshot.APIKey) bool { return k.Prefix == prefix })
}

// ReadSnapshot reads and decodes the published snapshot of ns: its index ConfigMap and every chunk.
func ReadSnapshot(ctx context.Context, c client.Reader, ns string) (*snapshot.Snapshot, error) {
	var index corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: snapshot.IndexName}, &index); err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(index.Data[snapshot.DataChunks])
	if err != nil {
		return nil, err
	}
	payload := append([]byte(nil), index.BinaryData[snapshot.BinaryPayload]...)
	for i := 1; i <= n; i++ {
		var chunk corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: snapshot.ChunkName(i)}, &chunk); err != nil {
			return nil, err
		}
		payload = append(payload, chunk.BinaryData[snapshot.BinaryPayload]...)
	}
	return snapshot.Decode(payload, index.Data[snapshot.DataChecksum])
}

// MustSnapshot reads the current snapshot of ns.
func MustSnapshot(ns string) *snapshot.Snapshot {
	ginkgo.GinkgoHelper()
	s, err := ReadSnapshot(Ctx, Client, ns)
	Expect(err).NotTo(HaveOccurred())
	return s
}

// Workspace creates a fresh namespace (a workspace) and a workspace key of the given type in it, and waits until
// the directory authenticates that key. It returns the namespace and the key.
func Workspace(typ gatewayv1.WorkspaceKeyType, role gatewayv1.OrgRole) (string, string) {
	ginkgo.GinkgoHelper()
	ns, err := kubetest.NewNamespace(Ctx, Client, "ws-")
	Expect(err).NotTo(HaveOccurred())
	Dir.Add(ns)
	return ns, SeedKey(ns, typ, role, "user-1")
}

var seedCount int

// SeedKey writes a WorkspaceAPIKey directly (as kubectl would) and waits until it authenticates.
func SeedKey(ns string, typ gatewayv1.WorkspaceKeyType, role gatewayv1.OrgRole, user string) string {
	ginkgo.GinkgoHelper()
	seedCount++
	key := fmt.Sprintf("mgw_seed%08d.%s", seedCount, "S3cr3tS3cr3tS3cr3tS3cr3tS3cr3tAb")
	sum := sha256.Sum256([]byte(key))
	k := &gatewayv1.WorkspaceAPIKey{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "seed-", Namespace: ns},
		Spec: gatewayv1.WorkspaceAPIKeySpec{
			Type:        typ,
			DisplayName: fmt.Sprintf("seed-%d", seedCount), // names are unique per team, user or workspace
			KeySource:   gatewayv1.KeySource{Prefix: key[:16], Hash: hex.EncodeToString(sum[:])},
		},
	}
	if typ == gatewayv1.KeyTypePersonal {
		k.Spec.Owner = &gatewayv1.KeyOwner{UserID: user, Email: user + "@example.com", Name: user, Role: role}
	}
	Expect(Client.Create(Ctx, k)).To(Succeed())
	Eventually(func() bool { _, ok := Dir.Lookup(key); return ok }).WithTimeout(30 * time.Second).Should(BeTrue())
	return key
}
