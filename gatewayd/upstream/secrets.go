package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// defaultSecretKey is the Secret entry holding an upstream key when the reference names none.
const defaultSecretKey = "api_key"

// ErrNotUpstreamCredential refuses a Secret that is not marked for upstream use (gatewayv1.IsUpstreamCredential).
var ErrNotUpstreamCredential = errors.New("secret is not labelled " + gatewayv1.LabelUpstreamCredential + "=true, or holds key material")

// ErrHostNotAllowed refuses to send a Secret to a host its annotation gatewayv1.AnnotationUpstreamHosts does not
// list.
var ErrHostNotAllowed = errors.New("secret's " + gatewayv1.AnnotationUpstreamHosts + " annotation does not list the upstream's host")

// Secrets reads Secrets with a short TTL: upstream keys, and the signing secrets of webhooks. A cached get rather
// than an informer, because gatewayd must not hold every Secret of every namespace in memory to use a handful; a
// rotated key is picked up within the TTL. A Secret that does not exist is remembered as absent for the TTL too,
// so calls to an Endpoint whose Secret was deleted do not each cost a read of the API server and a log line.
type Secrets struct {
	client kubernetes.Interface
	ttl    time.Duration
	mu     sync.Mutex
	m      map[string]secretEntry
}

type secretEntry struct {
	data        map[string][]byte
	labels      map[string]string
	annotations map[string]string
	missing     bool
	fetched     time.Time
}

// NewSecrets reads Secrets through client and reuses each read for ttl.
func NewSecrets(client kubernetes.Interface, ttl time.Duration) *Secrets {
	return &Secrets{client: client, ttl: ttl, m: map[string]secretEntry{}}
}

// Upstream returns the upstream key ref names in namespace ns, to be sent to url: it refuses a Secret not marked
// for upstream use, and one whose hosts (gatewayv1.UpstreamHostAllowed) do not include url's.
func (c *Secrets) Upstream(ctx context.Context, ns string, ref *snapshot.SecretRef, url string) (string, error) {
	e, err := c.entry(ctx, ns, ref.Name)
	if err != nil {
		return "", err
	}
	if err := upstreamAllowed(e, ns, ref, url); err != nil {
		return "", err
	}
	return value(e, ns, ref)
}

// UpstreamData returns the whole data of the Secret ref names in namespace ns, to sign a call to url (a Signer's
// credentials are several entries), under Upstream's rules: the Secret must be marked for upstream use and list
// url's host. The map is the cache's: it is only read.
func (c *Secrets) UpstreamData(ctx context.Context, ns string, ref *snapshot.SecretRef, url string) (map[string][]byte, error) {
	e, err := c.entry(ctx, ns, ref.Name)
	if err != nil {
		return nil, err
	}
	if err := upstreamAllowed(e, ns, ref, url); err != nil {
		return nil, err
	}
	return e.data, nil
}

// upstreamAllowed refuses to send e, the Secret ref names in ns, to url: a Secret not marked for upstream use, or
// whose hosts (gatewayv1.UpstreamHostAllowed) do not include url's.
func upstreamAllowed(e secretEntry, ns string, ref *snapshot.SecretRef, url string) error {
	if !gatewayv1.IsUpstreamCredential(e.labels) {
		return fmt.Errorf("secret %s/%s: %w", ns, ref.Name, ErrNotUpstreamCredential)
	}
	if allowed, _ := gatewayv1.UpstreamHostAllowed(e.annotations, url); !allowed {
		return fmt.Errorf("secret %s/%s: %w", ns, ref.Name, ErrHostNotAllowed)
	}
	return nil
}

// Get returns the entry ref names in namespace ns, whatever the Secret's labels: for secrets gatewayd uses itself,
// such as a webhook's signing secret.
func (c *Secrets) Get(ctx context.Context, ns string, ref *snapshot.SecretRef) (string, error) {
	e, err := c.entry(ctx, ns, ref.Name)
	if err != nil {
		return "", err
	}
	return value(e, ns, ref)
}

func value(e secretEntry, ns string, ref *snapshot.SecretRef) (string, error) {
	key := ref.Key
	if key == "" {
		key = defaultSecretKey
	}
	v, ok := e.data[key]
	if !ok {
		return "", fmt.Errorf("secret %s/%s has no entry %q", ns, ref.Name, key)
	}
	return string(v), nil
}

// entry returns the Secret, read again once the cached read is older than the TTL. When the API server cannot be
// reached, a stale value is better than failing every call, so it is used and the failure is logged.
func (c *Secrets) entry(ctx context.Context, ns, name string) (secretEntry, error) {
	id := ns + "/" + name
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if !ok || time.Since(e.fetched) > c.ttl {
		s, err := c.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			e, ok = secretEntry{data: s.Data, labels: s.Labels, annotations: s.Annotations, fetched: time.Now()}, true
			c.store(id, e)
		case apierrors.IsNotFound(err):
			if !ok || !e.missing {
				logr.FromContextOrDiscard(ctx).Info("Upstream Secret not found; calls that need it fail until it exists",
					"namespace", ns, "secret", name)
			}
			e, ok = secretEntry{missing: true, fetched: time.Now()}, true
			c.store(id, e)
		case ok && !e.missing:
			logr.FromContextOrDiscard(ctx).Error(err, "Failed to refresh Secret; using the cached value", "namespace", ns, "secret", name)
		default:
			return secretEntry{}, fmt.Errorf("failed to read Secret %s: %w", id, err)
		}
	}
	if e.missing {
		return secretEntry{}, fmt.Errorf("secret %s does not exist", id)
	}
	return e, nil
}

func (c *Secrets) store(id string, e secretEntry) {
	c.mu.Lock()
	c.m[id] = e
	c.mu.Unlock()
}
