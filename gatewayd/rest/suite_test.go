package rest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/keyuse"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/webhooks"
)

// The suite runs the real control plane in-process: envtest's kube-apiserver and etcd with the generated CRDs,
// and a manager with the admission webhooks and every controller, including the snapshot materializer. The API
// under test is served on a loopback httptest server. Its Directory reads the published snapshot ConfigMaps, as
// gatewayd's loader does, so read-your-writes is checked against what the data plane would load.

var (
	k8s    client.Client
	env    *kubetest.Env
	ctx    context.Context
	cancel context.CancelFunc
	dir    *snapshotDirectory
	server *httptest.Server
)

func TestREST(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "REST API Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())
	var err error
	env, err = startControlPlane(ctx)
	Expect(err).NotTo(HaveOccurred())
	k8s = env.Client
	dir = &snapshotDirectory{c: k8s}
	server = serve(rest.Options{})
})

// startControlPlane starts envtest with the CRDs and webhook configuration, and a manager running the webhooks
// and every controller until ctx ends. It returns once the webhook server answers; when it fails after envtest
// started, it returns the Env too, for the caller to stop.
func startControlPlane(ctx context.Context) (*kubetest.Env, error) {
	env, err := kubetest.Start(kubetest.Options{CRDs: true, Webhooks: true})
	if err != nil {
		return nil, err
	}
	mgr, err := env.NewManager(webhooks.SetupWithManager, func(mgr ctrl.Manager) error {
		return controllers.SetupWithManager(mgr, controllers.Options{SkipNameValidation: true})
	})
	if err != nil {
		return env, err
	}
	go func() { _ = mgr.Start(ctx) }()
	wctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	return env, env.WaitWebhook(wctx)
}

var _ = AfterSuite(func() {
	if server != nil {
		server.Close()
	}
	if cancel != nil {
		cancel()
	}
	Expect(env.Stop()).To(Succeed())
})

// serve starts the API with the suite's client and directory on a loopback server. The read-your-writes bound is
// generous so that the specs can assert that a write is in the snapshot as soon as the call returns.
func serve(opts rest.Options) *httptest.Server {
	opts.Client = k8s
	opts.Directory = dir
	if opts.ReadYourWritesTimeout == 0 {
		opts.ReadYourWritesTimeout = 30 * time.Second
	}
	opts.Logger = logf.Log.WithName("rest")
	mux := http.NewServeMux()
	rest.New(opts).Register(mux)
	srv := httptest.NewServer(mux)
	DeferCleanup(srv.Close)
	return srv
}

// snapshotDirectory is the test's Directory: it reads the snapshot ConfigMaps of the namespaces it was told about
// through the client on every call, and polls for WaitFor. With rec set, it records each authentication through
// auth.Lookup.Recording, as gatewayd wires it.
type snapshotDirectory struct {
	c          client.Reader
	rec        *keyuse.Recorder
	mu         sync.Mutex
	namespaces []string
}

func (d *snapshotDirectory) add(ns string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.namespaces = append(d.namespaces, ns)
}

func (d *snapshotDirectory) WorkspaceKey(key string) (auth.Caller, bool) {
	if d.rec != nil {
		return auth.Lookup(d.lookup).Recording(d.rec)(key)
	}
	return d.lookup(key)
}

// lookup finds key in the current snapshot of each namespace, and computes its caller from that snapshot.
func (d *snapshotDirectory) lookup(key string) (auth.Caller, bool) {
	if len(key) < 16 {
		return auth.Caller{}, false
	}
	d.mu.Lock()
	namespaces := append([]string(nil), d.namespaces...)
	d.mu.Unlock()
	sum := sha256.Sum256([]byte(key))
	for _, ns := range namespaces {
		s, err := readSnapshot(context.Background(), d.c, ns)
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

func (d *snapshotDirectory) WaitFor(ctx context.Context, ns string, pred func(*snapshot.Snapshot) bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if s, err := readSnapshot(ctx, d.c, ns); err == nil && pred(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (d *snapshotDirectory) HasAPIKey(ns, prefix string) bool {
	s, err := readSnapshot(context.Background(), d.c, ns)
	return err == nil && slices.ContainsFunc(s.APIKeys, func(k snapshot.APIKey) bool { return k.Prefix == prefix })
}

func readSnapshot(ctx context.Context, c client.Reader, ns string) (*snapshot.Snapshot, error) {
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

// mustSnapshot reads the current snapshot of ns.
func mustSnapshot(ns string) *snapshot.Snapshot {
	GinkgoHelper()
	s, err := readSnapshot(ctx, k8s, ns)
	Expect(err).NotTo(HaveOccurred())
	return s
}

// workspace creates a fresh namespace (a workspace) and a workspace key of the given type in it, and waits until
// the directory authenticates that key. It returns the namespace and the key.
func workspace(typ gatewayv1.WorkspaceKeyType, role gatewayv1.OrgRole) (string, string) {
	GinkgoHelper()
	ns, err := kubetest.NewNamespace(ctx, k8s, "ws-")
	Expect(err).NotTo(HaveOccurred())
	dir.add(ns)
	return ns, seedKey(ns, typ, role, "user-1")
}

var seedCount int

// seedKey writes a WorkspaceAPIKey directly (as kubectl would) and waits until it authenticates.
func seedKey(ns string, typ gatewayv1.WorkspaceKeyType, role gatewayv1.OrgRole, user string) string {
	GinkgoHelper()
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
	Expect(k8s.Create(ctx, k)).To(Succeed())
	Eventually(func() bool { _, ok := dir.lookup(key); return ok }).WithTimeout(30 * time.Second).Should(BeTrue())
	return key
}

// response is one HTTP exchange.
type response struct {
	code   int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.code, r.raw) }

// call sends one request. body is marshalled unless it is a []byte or string, which are sent as is.
func call(srv *httptest.Server, key, method, path string, body any, headers ...string) response {
	GinkgoHelper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		Expect(err).NotTo(HaveOccurred())
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, rd)
	Expect(err).NotTo(HaveOccurred())
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	out := response{code: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 && raw[0] == '{' {
		Expect(json.Unmarshal(raw, &out.body)).To(Succeed(), "body %s", raw)
	}
	return out
}

// expectError asserts a 4xx in the envelope with the given status and error_code.
func expectError(r response, status int, code string) {
	GinkgoHelper()
	Expect(r.code).To(Equal(status), "response %s", r)
	Expect(r.body).To(HaveKeyWithValue("error_code", code), "response %s", r)
	Expect(r.body).To(HaveKey("detail"))
	Expect(r.body["error"]).NotTo(BeEmpty())
	conform("Error", r.raw)
}
