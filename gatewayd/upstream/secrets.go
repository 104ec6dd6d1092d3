package upstream

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/modelgate/modelgate/api/snapshot"
)

// defaultSecretKey is the Secret entry holding an upstream key when the reference names none.
const defaultSecretKey = "api_key"

// Secrets reads upstream keys from their Secrets with a short TTL. A cached get rather than an informer,
// because gatewayd must not hold every Secret of every namespace in memory to use a handful; a rotated key
// is picked up within the TTL.
type Secrets struct {
	client kubernetes.Interface
	ttl    time.Duration
	mu     sync.Mutex
	m      map[string]secretEntry
}

type secretEntry struct {
	data    map[string][]byte
	fetched time.Time
}

// NewSecrets reads Secrets through client and reuses each for ttl.
func NewSecrets(client kubernetes.Interface, ttl time.Duration) *Secrets {
	return &Secrets{client: client, ttl: ttl, m: map[string]secretEntry{}}
}

// Get returns the entry ref names in namespace ns. When the API server cannot be reached, a stale value is
// better than failing every call, so it is used and the failure is logged.
func (c *Secrets) Get(ctx context.Context, ns string, ref *snapshot.SecretRef) (string, error) {
	key := ref.Key
	if key == "" {
		key = defaultSecretKey
	}
	id := ns + "/" + ref.Name
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if !ok || time.Since(e.fetched) > c.ttl {
		s, err := c.client.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case err == nil:
			e = secretEntry{data: s.Data, fetched: time.Now()}
			c.mu.Lock()
			c.m[id] = e
			c.mu.Unlock()
		case ok:
			logr.FromContextOrDiscard(ctx).Error(err, "Failed to refresh upstream Secret; using the cached value", "namespace", ns, "secret", ref.Name)
		default:
			return "", fmt.Errorf("failed to read Secret %s: %w", id, err)
		}
	}
	v, ok := e.data[key]
	if !ok {
		return "", fmt.Errorf("secret %s has no entry %q", id, key)
	}
	return string(v), nil
}
