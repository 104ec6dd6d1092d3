// Package certs gives the manager's admission webhook server its serving certificate. In cert-manager mode
// cert-manager issues it into the mounted cert directory and cainjector fills the caBundle, so the webhooks are
// registered at once. In self-managed mode (clusters without cert-manager) the manager keeps a CA and a serving
// certificate in a Secret, injects the CA into the ValidatingWebhookConfiguration and rotates both before they
// expire, using github.com/open-policy-agent/cert-controller; the webhook server is started only once the
// certificate is in the Secret, mounted in the cert directory and trusted by the configuration, and readiness
// fails until it serves.
package certs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Mode says who provides the webhook serving certificate.
type Mode string

const (
	// ModeSelfManaged: the manager generates, stores, injects and rotates the certificate itself.
	ModeSelfManaged Mode = "self-managed"
	// ModeCertManager: cert-manager issues the certificate into the cert directory and injects the CA.
	ModeCertManager Mode = "cert-manager"
)

// DefaultMode is the mode the Helm chart uses unless webhook.certManager.enabled is set.
const DefaultMode = ModeSelfManaged

// Identity of the generated CA. It only signs the serving certificate, so the name is informative.
const (
	caName         = "modelgate-webhook-ca"
	caOrganization = "modelgate"
)

// DefaultControllerName names the rotator's controller; controller-runtime refuses two controllers of one name
// in a process.
const DefaultControllerName = "webhook-cert-rotator"

// Options configure the webhook serving certificate.
type Options struct {
	// Mode is self-managed or cert-manager.
	Mode Mode
	// CertDir holds tls.crt and tls.key for the webhook server (the mounted Secret).
	CertDir string
	// Namespace holds the Secret and the webhook Service: the manager's own namespace (POD_NAMESPACE).
	Namespace string
	// SecretName is the Secret the self-managed CA and serving certificate are kept in.
	SecretName string
	// ServiceName is the Service the API server calls the webhooks through; the certificate covers
	// <service>.<namespace>.svc.
	ServiceName string
	// WebhookConfigurationName is the ValidatingWebhookConfiguration whose caBundle is filled in.
	WebhookConfigurationName string
	// MutatingWebhookConfigurationName is the MutatingWebhookConfiguration whose caBundle is filled in.
	MutatingWebhookConfigurationName string
	// ControllerName overrides DefaultControllerName, for processes that start more than one manager (tests).
	ControllerName string
}

// Validate reports the first option that cannot work, naming the flag and the rule.
func (o Options) Validate() error {
	switch o.Mode {
	case ModeCertManager:
		if o.CertDir == "" {
			return errors.New("--webhook-cert-dir must not be empty: the webhook server reads tls.crt and tls.key from it")
		}
		return nil
	case ModeSelfManaged:
		// Checked below.
	default:
		return fmt.Errorf("--webhook-cert-mode=%q is not supported: use %q or %q", o.Mode, ModeSelfManaged, ModeCertManager)
	}
	if o.CertDir == "" {
		return errors.New("--webhook-cert-dir must not be empty: the webhook server reads tls.crt and tls.key from it")
	}
	// Namespaces and Services are DNS labels (the certificate's DNS name is built from them); Secrets and
	// webhook configurations are DNS subdomains.
	names := []struct {
		what, value string
		valid       func(string) []string
	}{
		{"POD_NAMESPACE (the manager's namespace)", o.Namespace, validation.IsDNS1123Label},
		{"--webhook-secret-name", o.SecretName, validation.IsDNS1123Subdomain},
		{"--webhook-service-name", o.ServiceName, validation.IsDNS1123Label},
		{"--webhook-configuration-name", o.WebhookConfigurationName, validation.IsDNS1123Subdomain},
		{"--mutating-webhook-configuration-name", o.MutatingWebhookConfigurationName, validation.IsDNS1123Subdomain},
	}
	for _, n := range names {
		if n.value == "" {
			return fmt.Errorf("%s is required with --webhook-cert-mode=%s (use --webhook-cert-mode=%s when cert-manager issues the certificate)",
				n.what, ModeSelfManaged, ModeCertManager)
		}
		if errs := n.valid(n.value); len(errs) > 0 {
			return fmt.Errorf("%s=%q is not a valid Kubernetes name: %s", n.what, n.value, strings.Join(errs, "; "))
		}
	}
	return nil
}

// DNSName is the name the API server verifies the serving certificate against.
func (o Options) DNSName() string {
	return fmt.Sprintf("%s.%s.svc", o.ServiceName, o.Namespace)
}

// Register adds the webhooks to the manager; it is webhooks.SetupWithManager in the manager.
type Register func(mgr manager.Manager) error

// Setup arranges the serving certificate and calls register to add the webhooks: at once in cert-manager mode,
// and in self-managed mode only after the certificate is in place, so that the webhook server never starts
// without one. It returns the readiness check for the webhook server, which fails until the server serves.
// In self-managed mode it creates the Secret when it does not exist yet.
func Setup(ctx context.Context, mgr manager.Manager, o Options, register Register) (healthz.Checker, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Mode == ModeCertManager {
		if err := register(mgr); err != nil {
			return nil, err
		}
		return mgr.GetWebhookServer().StartedChecker(), nil
	}

	key := types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName}
	if err := ensureSecret(ctx, mgr, key); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      key,
		CertDir:        o.CertDir,
		CAName:         caName,
		CAOrganization: caOrganization,
		DNSName:        o.DNSName(),
		ExtraDNSNames:  []string{o.DNSName() + ".cluster.local"},
		IsReady:        ready,
		Webhooks: []rotator.WebhookInfo{
			{Name: o.WebhookConfigurationName, Type: rotator.Validating},
			{Name: o.MutatingWebhookConfigurationName, Type: rotator.Mutating},
		},
		FieldOwner: "modelgate-manager",
		// Every replica serves webhooks, so every replica must see the certificate; concurrent writers are
		// serialized by the Secret's resourceVersion.
		RequireLeaderElection: false,
		// The webhook server reloads the files when the kubelet refreshes them, so no restart is needed.
		RestartOnSecretRefresh: false,
		ControllerName:         cmp.Or(o.ControllerName, DefaultControllerName),
	})
	if err != nil {
		return nil, fmt.Errorf("failed to add the webhook certificate rotator for Secret %s: %w", key, err)
	}
	g := &gate{mgr: mgr, ready: ready, register: register}
	if err := mgr.Add(g); err != nil {
		return nil, fmt.Errorf("failed to add the webhook server gate: %w", err)
	}
	return g.check, nil
}

// ensureSecret creates the empty Secret the rotator fills, because the rotator requires it to exist. The
// chart creates it, so this only matters for other installs; it reads uncached since the cache has not started.
func ensureSecret(ctx context.Context, mgr manager.Manager, key types.NamespacedName) error {
	err := mgr.GetAPIReader().Get(ctx, key, &corev1.Secret{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to read the webhook certificate Secret %s: %w", key, err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Type:       corev1.SecretTypeOpaque,
	}
	if err := mgr.GetClient().Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create the webhook certificate Secret %s: %w", key, err)
	}
	logf.FromContext(ctx).Info("Created the webhook certificate Secret", "secret", key)
	return nil
}

// gate registers the webhooks once the rotator reports the certificate mounted and its CA injected. Adding the
// webhook server to a running manager starts it at once.
type gate struct {
	mgr      manager.Manager
	ready    <-chan struct{}
	register Register
	started  atomic.Pointer[healthz.Checker]
}

// NeedLeaderElection is false: every replica serves the webhooks.
func (g *gate) NeedLeaderElection() bool { return false }

func (g *gate) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-g.ready:
	}
	if err := g.register(g.mgr); err != nil {
		return fmt.Errorf("failed to register the webhooks once their certificate was in place: %w", err)
	}
	checker := g.mgr.GetWebhookServer().StartedChecker()
	g.started.Store(&checker)
	logf.FromContext(ctx).Info("Webhook certificate in place, serving the webhooks")
	<-ctx.Done()
	return nil
}

// check is the readiness check: failing until the certificate is in place, then the webhook server's own.
func (g *gate) check(req *http.Request) error {
	c := g.started.Load()
	if c == nil {
		return errors.New("the webhook serving certificate is not in place yet")
	}
	return (*c)(req)
}
