package rest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/webhooks"
)

// The suite runs the real control plane in-process: envtest's kube-apiserver and etcd with the generated CRDs,
// and a manager with the admission webhooks and every controller, including the snapshot materializer. The API
// under test is served on a loopback httptest server. Its Directory reads the published snapshot ConfigMaps, as
// gatewayd's loader does, so read-your-writes is checked against what the data plane would load.

var (
	k8s     client.Client
	testEnv *envtest.Environment
	ctx     context.Context
	cancel  context.CancelFunc
	dir     *snapshotDirectory
	server  *httptest.Server
)

func TestREST(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "REST API Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())
	var err error
	testEnv, k8s, err = startControlPlane(ctx)
	Expect(err).NotTo(HaveOccurred())
	dir = &snapshotDirectory{c: k8s}
	server = serve(rest.Options{})
})

// startControlPlane starts envtest with the CRDs and webhook configuration, and a manager running the webhooks
// and every controller until ctx ends. It returns once the webhook server answers.
func startControlPlane(ctx context.Context) (*envtest.Environment, client.Client, error) {
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join("..", "..", "config", "webhook", "manifests.yaml")},
		},
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to start envtest: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return env, nil, err
	}
	if err := gatewayv1.AddToScheme(scheme); err != nil {
		return env, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return env, nil, err
	}
	wio := &env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return env, nil, err
	}
	if err := webhooks.SetupWithManager(mgr); err != nil {
		return env, nil, err
	}
	if err := controllers.SetupWithManager(mgr, controllers.Options{SkipNameValidation: true}); err != nil {
		return env, nil, err
	}
	go func() { _ = mgr.Start(ctx) }()
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test-only probe of a local self-signed server
		if err == nil {
			_ = conn.Close()
			return env, c, nil
		}
		if time.Now().After(deadline) {
			return env, c, fmt.Errorf("webhook server did not answer: %w", err)
		}
	}
}

var _ = AfterSuite(func() {
	if server != nil {
		server.Close()
	}
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
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
// through the client on every call, and polls for WaitFor.
type snapshotDirectory struct {
	c          client.Reader
	mu         sync.Mutex
	namespaces []string
}

func (d *snapshotDirectory) add(ns string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.namespaces = append(d.namespaces, ns)
}

func (d *snapshotDirectory) WorkspaceKey(key string) (string, snapshot.WorkspaceAPIKey, bool) {
	if len(key) < 16 {
		return "", snapshot.WorkspaceAPIKey{}, false
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
				return ns, k, true
			}
		}
	}
	return "", snapshot.WorkspaceAPIKey{}, false
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
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ws-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	dir.add(ns.Name)
	return ns.Name, seedKey(ns.Name, typ, role, "user-1")
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
			DisplayName: "seed",
			KeySource:   gatewayv1.KeySource{Prefix: key[:16], Hash: hex.EncodeToString(sum[:])},
		},
	}
	if typ == gatewayv1.KeyTypePersonal {
		k.Spec.Owner = &gatewayv1.KeyOwner{UserID: user, Email: user + "@example.com", Name: user, Role: role}
	}
	Expect(k8s.Create(ctx, k)).To(Succeed())
	Eventually(func() bool { _, _, ok := dir.WorkspaceKey(key); return ok }).WithTimeout(30 * time.Second).Should(BeTrue())
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

func limit(typ, unit string, threshold int) map[string]any {
	return map[string]any{"type": typ, "unit": unit, "threshold": threshold}
}

func model(slug string, rate, usage []map[string]any) map[string]any {
	m := map[string]any{"slug": slug}
	if rate != nil {
		m["rate_limits"] = rate
	}
	if usage != nil {
		m["usage_limits"] = usage
	}
	return m
}

func groupBody(ext, mode string, parent any, models ...map[string]any) map[string]any {
	h := map[string]any{"parent_group_id": parent}
	if mode != "" {
		h["limit_enforcement"] = mode
	}
	return map[string]any{"metadata": map[string]any{"name": "Name " + ext, "external_entity_id": ext}, "models": models, "hierarchy": h}
}
