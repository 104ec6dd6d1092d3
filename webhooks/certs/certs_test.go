package certs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/modelgate/modelgate/test/testutil"
	"github.com/modelgate/modelgate/webhooks/certs"
)

// pingPath is the handler the specs register in place of the real webhooks, to see the server answer.
const pingPath = "/ping"

// Keys the rotator keeps in the Secret.
const (
	caCrt  = "ca.crt"
	caKey  = "ca.key"
	tlsCrt = "tls.crt"
	tlsKey = "tls.key"
)

var controllerSeq atomic.Int64

var _ = Describe("Self-managed webhook certificate", func() {
	var (
		ns   string
		opts certs.Options
		key  types.NamespacedName
	)

	BeforeEach(func() {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "certs-"}}
		Expect(k8s.Create(ctx, n)).To(Succeed())
		ns = n.Name

		// The generated webhook configurations, as make manifests writes them, under names of this spec's own.
		vwc, mwc := webhookConfigurations()
		vwc.Name = "modelgate-validating-" + ns
		mwc.Name = "modelgate-mutating-" + ns
		for _, c := range []client.Object{vwc, mwc} {
			Expect(k8s.Create(ctx, c)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(context.Background(), c))).To(Succeed()) })
		}

		opts = certs.Options{
			Mode:                             certs.ModeSelfManaged,
			CertDir:                          GinkgoT().TempDir(),
			Namespace:                        ns,
			SecretName:                       "modelgate-webhook-server-cert",
			ServiceName:                      "modelgate-webhook",
			WebhookConfigurationName:         vwc.Name,
			MutatingWebhookConfigurationName: mwc.Name,
		}
		key = types.NamespacedName{Namespace: ns, Name: opts.SecretName}
	})

	It("creates and fills the Secret, injects the CA, and serves only once the certificate is mounted", func() {
		Expect(apierrors.IsNotFound(k8s.Get(ctx, key, &corev1.Secret{}))).To(BeTrue(), "the Secret must not exist before the manager starts")

		m := startManager(opts)
		secret := eventuallyFilledSecret(key)
		expectServingCertFor(secret, opts.DNSName())
		expectServingCertFor(secret, opts.DNSName()+".cluster.local")
		eventuallyCABundle(opts, secret.Data[caCrt])

		// The Secret is filled and the CA trusted, but no kubelet has mounted the files yet: the webhook server must
		// not have started, and the manager must not be ready.
		Expect(m.registered.Load()).To(BeFalse(), "the webhooks were registered before the certificate was mounted")
		Expect(m.ready(nil)).To(MatchError(ContainSubstring("not in place yet")))

		mountSecret(m.ctx, key, opts.CertDir)
		Eventually(m.ready).WithArguments((*http.Request)(nil)).Should(Succeed())
		Expect(m.registered.Load()).To(BeTrue())
		expectServes(m.port, opts.DNSName(), secret)
		m.stop()
	})

	It("keeps the chart's empty Secret, reuses its certificate on a second start and puts a removed caBundle back", func() {
		// The chart creates the Secret with no data and a label; the manager fills it without replacing it.
		chartSecret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: opts.SecretName, Labels: map[string]string{"app.kubernetes.io/name": "modelgate"}},
			Type:       corev1.SecretTypeOpaque,
		}
		Expect(k8s.Create(ctx, chartSecret)).To(Succeed())

		first := startManager(opts)
		mountSecret(first.ctx, key, opts.CertDir)
		Eventually(first.ready).WithArguments((*http.Request)(nil)).Should(Succeed())
		issued := eventuallyFilledSecret(key)
		Expect(issued.UID).To(Equal(chartSecret.UID))
		Expect(issued.Labels).To(HaveKeyWithValue("app.kubernetes.io/name", "modelgate"))
		eventuallyCABundle(opts, issued.Data[caCrt])
		first.stop()

		// Re-applying the configuration as rendered (no caBundle) wipes the CA; the next start must put it back.
		vwc := &admissionv1.ValidatingWebhookConfiguration{}
		Expect(k8s.Get(ctx, types.NamespacedName{Name: opts.WebhookConfigurationName}, vwc)).To(Succeed())
		for i := range vwc.Webhooks {
			vwc.Webhooks[i].ClientConfig.CABundle = nil
		}
		Expect(k8s.Update(ctx, vwc)).To(Succeed())

		// A new pod: a fresh mount of the same Secret.
		opts.CertDir = GinkgoT().TempDir()
		second := startManager(opts)
		mountSecret(second.ctx, key, opts.CertDir)
		Eventually(second.ready).WithArguments((*http.Request)(nil)).Should(Succeed())
		eventuallyCABundle(opts, issued.Data[caCrt])

		reused := &corev1.Secret{}
		Expect(k8s.Get(ctx, key, reused)).To(Succeed())
		for _, k := range []string{caCrt, caKey, tlsCrt, tlsKey} {
			Expect(reused.Data[k]).To(Equal(issued.Data[k]), "the second start replaced %s", k)
		}
		expectServes(second.port, opts.DNSName(), reused)
		second.stop()
	})

	It("renews a serving certificate that is about to expire, keeping the CA", func() {
		ca, caKeyPEM, caCertPEM := newCA("modelgate-webhook-ca", 5*365*24*time.Hour)
		certPEM, keyPEM := newServingCert(ca, caKeyPEM, opts.DNSName(), 10*24*time.Hour)
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: opts.SecretName},
			Data:       map[string][]byte{caCrt: caCertPEM, caKey: caKeyPEM, tlsCrt: certPEM, tlsKey: keyPEM},
		})).To(Succeed())

		m := startManager(opts)
		mountSecret(m.ctx, key, opts.CertDir)
		Eventually(m.ready).WithArguments((*http.Request)(nil)).Should(Succeed())

		renewed := &corev1.Secret{}
		Expect(k8s.Get(ctx, key, renewed)).To(Succeed())
		Expect(renewed.Data[caCrt]).To(Equal(caCertPEM), "a CA that is still valid must be kept")
		Expect(renewed.Data[tlsCrt]).NotTo(Equal(certPEM), "a certificate that expires within the renewal window must be replaced")
		leaf := expectServingCertFor(renewed, opts.DNSName())
		Expect(leaf.NotAfter).To(BeTemporally(">", time.Now().Add(90*24*time.Hour)))
		eventuallyCABundle(opts, caCertPEM)
		expectServes(m.port, opts.DNSName(), renewed)
		m.stop()
	})
})

var _ = Describe("cert-manager webhook certificate", func() {
	It("registers the webhooks at once and writes no Secret", func() {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "certs-"}}
		Expect(k8s.Create(ctx, n)).To(Succeed())

		mgr := newManager(GinkgoT().TempDir(), testutil.MustFreePort(GinkgoT()))
		var registered atomic.Bool
		_, err := certs.Setup(ctx, mgr, certs.Options{
			Mode: certs.ModeCertManager, CertDir: GinkgoT().TempDir(),
			// Ignored in this mode; set to show that nothing is created from them.
			Namespace: n.Name, SecretName: "modelgate-webhook-server-cert",
		}, func(manager.Manager) error { registered.Store(true); return nil })
		Expect(err).NotTo(HaveOccurred())
		Expect(registered.Load()).To(BeTrue())

		var secrets corev1.SecretList
		Expect(k8s.List(ctx, &secrets, client.InNamespace(n.Name))).To(Succeed())
		Expect(secrets.Items).To(BeEmpty())
	})

	It("refuses options that cannot work before touching the cluster", func() {
		mgr := newManager(GinkgoT().TempDir(), testutil.MustFreePort(GinkgoT()))
		_, err := certs.Setup(ctx, mgr, certs.Options{Mode: certs.ModeSelfManaged, CertDir: GinkgoT().TempDir()},
			func(manager.Manager) error { return nil })
		Expect(err).To(MatchError(ContainSubstring("POD_NAMESPACE (the manager's namespace) is required")))
	})
})

// runningManager is a started manager with the webhook certificate set up.
type runningManager struct {
	ctx        context.Context
	ready      healthz.Checker
	registered *atomic.Bool
	port       int
	stop       func()
}

// startManager starts a manager as cmd/manager does, with a ping handler standing in for the webhooks.
func startManager(o certs.Options) *runningManager {
	// controller-runtime refuses two controllers of one name in a process, and the specs start several managers.
	o.ControllerName = fmt.Sprintf("webhook-cert-rotator-%d", controllerSeq.Add(1))
	port := testutil.MustFreePort(GinkgoT())
	mgr := newManager(o.CertDir, port)
	m := &runningManager{registered: &atomic.Bool{}, port: port}
	ready, err := certs.Setup(ctx, mgr, o, func(mgr manager.Manager) error {
		mgr.GetWebhookServer().Register(pingPath, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "pong")
		}))
		m.registered.Store(true)
		return nil
	})
	Expect(err).NotTo(HaveOccurred())
	m.ready = ready

	mctx, cancel := context.WithCancel(ctx)
	m.ctx = mctx
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	m.stop = func() {
		cancel()
		Eventually(done).Should(Receive(BeNil()))
	}
	DeferCleanup(cancel)
	return m
}

func newManager(certDir string, port int) manager.Manager {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir}),
	})
	Expect(err).NotTo(HaveOccurred())
	return mgr
}

// mountSecret plays the kubelet's part for the Secret volume: it writes the Secret's tls.crt and tls.key into
// dir whenever they change, until ctx ends.
func mountSecret(ctx context.Context, key types.NamespacedName, dir string) {
	go func() {
		defer GinkgoRecover()
		var last []byte
		for ctx.Err() == nil {
			s := &corev1.Secret{}
			if err := k8s.Get(ctx, key, s); err == nil && len(s.Data[tlsCrt]) > 0 && !bytes.Equal(s.Data[tlsCrt], last) {
				// The key first, so the watcher never pairs a new certificate with an old key for long.
				Expect(os.WriteFile(filepath.Join(dir, tlsKey), s.Data[tlsKey], 0o600)).To(Succeed())
				Expect(os.WriteFile(filepath.Join(dir, tlsCrt), s.Data[tlsCrt], 0o600)).To(Succeed())
				last = s.Data[tlsCrt]
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

func eventuallyFilledSecret(key types.NamespacedName) *corev1.Secret {
	s := &corev1.Secret{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, key, s)).To(Succeed())
		g.Expect(s.Data).To(SatisfyAll(HaveKey(caCrt), HaveKey(caKey), HaveKey(tlsCrt), HaveKey(tlsKey)))
	}).Should(Succeed())
	return s
}

func eventuallyCABundle(opts certs.Options, ca []byte) {
	Eventually(func(g Gomega) {
		vwc := &admissionv1.ValidatingWebhookConfiguration{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: opts.WebhookConfigurationName}, vwc)).To(Succeed())
		g.Expect(vwc.Webhooks).To(HaveLen(10))
		for _, wh := range vwc.Webhooks {
			g.Expect(wh.ClientConfig.CABundle).To(Equal(ca), "webhook %s", wh.Name)
		}
		mwc := &admissionv1.MutatingWebhookConfiguration{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Name: opts.MutatingWebhookConfigurationName}, mwc)).To(Succeed())
		g.Expect(mwc.Webhooks).To(HaveLen(3))
		for _, wh := range mwc.Webhooks {
			g.Expect(wh.ClientConfig.CABundle).To(Equal(ca), "webhook %s", wh.Name)
		}
	}).Should(Succeed())
}

// expectServingCertFor checks that the Secret's serving certificate chains to its CA for dnsName, as a TLS
// server certificate, and that the key matches; it returns the certificate.
func expectServingCertFor(s *corev1.Secret, dnsName string) *x509.Certificate {
	_, err := tls.X509KeyPair(s.Data[tlsCrt], s.Data[tlsKey])
	Expect(err).NotTo(HaveOccurred(), "tls.key does not match tls.crt")
	roots := x509.NewCertPool()
	Expect(roots.AppendCertsFromPEM(s.Data[caCrt])).To(BeTrue())
	block, _ := pem.Decode(s.Data[tlsCrt])
	Expect(block).NotTo(BeNil())
	leaf, err := x509.ParseCertificate(block.Bytes)
	Expect(err).NotTo(HaveOccurred())
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	Expect(err).NotTo(HaveOccurred())
	return leaf
}

// expectServes connects as the API server would: trusting only the Secret's CA and verifying the Service's DNS
// name. The server must present the Secret's certificate and answer the registered handler. Every attempt makes
// a new connection with its own handshake: until the mount catches up with a renewal, the server presents the
// certificate mounted before it, and a kept-alive connection would go on showing that one.
func expectServes(port int, dnsName string, s *corev1.Secret) {
	roots := x509.NewCertPool()
	Expect(roots.AppendCertsFromPEM(s.Data[caCrt])).To(BeTrue())
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: dnsName},
		DisableKeepAlives: true,
	}}
	Eventually(func(g Gomega) {
		resp, err := c.Get("https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + pingPath)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		g.Expect(string(body)).To(Equal("pong"))
		served := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: resp.TLS.PeerCertificates[0].Raw})
		g.Expect(bytes.TrimSpace(served)).To(Equal(bytes.TrimSpace(s.Data[tlsCrt])))
	}).Should(Succeed())
}

// webhookConfiguration reads the ValidatingWebhookConfiguration that make manifests generates.
func webhookConfigurations() (*admissionv1.ValidatingWebhookConfiguration, *admissionv1.MutatingWebhookConfiguration) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "webhook", "manifests.yaml"))
	Expect(err).NotTo(HaveOccurred())
	vwc := &admissionv1.ValidatingWebhookConfiguration{}
	mwc := &admissionv1.MutatingWebhookConfiguration{}
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var meta metav1.TypeMeta
		Expect(yaml.Unmarshal(doc, &meta)).To(Succeed())
		switch meta.Kind {
		case "ValidatingWebhookConfiguration":
			Expect(yaml.Unmarshal(doc, vwc)).To(Succeed())
		case "MutatingWebhookConfiguration":
			Expect(yaml.Unmarshal(doc, mwc)).To(Succeed())
		}
	}
	Expect(vwc.Webhooks).To(HaveLen(10))
	Expect(mwc.Webhooks).To(HaveLen(3))
	return vwc, mwc
}

// newCA makes a CA in the rotator's format (PKCS#1 RSA key, the CA name as a DNS name).
func newCA(name string, validity time.Duration) (*x509.Certificate, []byte, []byte) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		IsCA:     true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	Expect(err).NotTo(HaveOccurred())
	ca, err := x509.ParseCertificate(der)
	Expect(err).NotTo(HaveOccurred())
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return ca, keyPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newServingCert(ca *x509.Certificate, caKeyPEM []byte, dnsName string, validity time.Duration) ([]byte, []byte) {
	block, _ := pem.Decode(caKeyPEM)
	caKey, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	Expect(err).NotTo(HaveOccurred())
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	Expect(err).NotTo(HaveOccurred())
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}
