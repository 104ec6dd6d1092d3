package webhooks_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/webhooks"
)

var (
	k8s     client.Client
	testEnv *envtest.Environment
	ctx     context.Context
	cancel  context.CancelFunc
)

func TestWebhooks(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhooks Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// Only the generated file: the directory also holds kustomize inputs that are not webhook configurations.
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join("..", "config", "webhook", "manifests.yaml")},
		},
	}
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())

	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(gatewayv1.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	wio := &testEnv.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(webhooks.SetupWithManager(mgr)).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()

	// The API server calls the webhook over TLS; wait until it answers before the first write.
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	Eventually(func() error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test-only probe of a local self-signed server
		if err != nil {
			return err
		}
		return conn.Close()
	}).Should(Succeed())
})

var _ = AfterSuite(func() {
	cancel()
	Expect(testEnv.Stop()).To(Succeed())
})

// newNamespace gives each spec its own workspace, so that uniqueness rules of one spec do not see another's objects.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ws-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// expectRefused asserts a refusal by admission: Invalid or Forbidden, naming the field path and the rule.
func expectRefused(err error, path, rule string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "write was admitted, want a refusal at %s", path)
	Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "want Invalid or Forbidden, got %v", err)
	Expect(err.Error()).To(ContainSubstring(path))
	Expect(err.Error()).To(ContainSubstring(rule))
}

func str(s string) *string { return &s }

func group(ns, name, parent string, mode gatewayv1.LimitEnforcement, models ...gatewayv1.ModelConfig) *gatewayv1.Group {
	g := &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	g.Spec.ExternalEntityID = "ext-" + name
	g.Spec.Hierarchy.LimitEnforcement = mode
	if parent != "" {
		g.Spec.Hierarchy.ParentGroupID = str(parent)
	}
	if len(models) == 0 {
		models = []gatewayv1.ModelConfig{{Slug: "demo/echo"}}
	}
	g.Spec.Models = models
	return g
}

func rateModel(slug string, typ gatewayv1.LimitType, threshold int64) gatewayv1.ModelConfig {
	return gatewayv1.ModelConfig{Slug: slug, RateLimits: []gatewayv1.Limit{{Type: typ, Unit: gatewayv1.UnitMinute, Threshold: threshold}}}
}

// hash64 is a well-formed hash; the webhooks never look at it, only CEL checks its shape.
func hash64(i int) string { return fmt.Sprintf("%064x", i) }
