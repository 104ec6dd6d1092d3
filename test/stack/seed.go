package stack

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// SigningKeyFile is the name, inside the dev directory, of the Workspace's Ed25519 private key (PKCS#8 PEM).
const SigningKeyFile = "workspace-ed25519.pem"

// seed creates the Workspace, the admin workspace key with its Secret, the demo Endpoint with its upstream
// Secret, the demo Model with its deployment at the demo model server (the deployment first, so the Model's
// admission finds what it points at), and the demo Chain with its two-chainlet deployment on the same server. Each create is retried until the deadline, because the webhooks may refuse connections for a moment
// after their server starts.
func (s *Stack) seed(ctx context.Context) error {
	signing, err := LoadOrCreateSigningKey(filepath.Join(s.devDir, SigningKeyFile))
	if err != nil {
		return err
	}
	s.SigningKey = signing
	if s.APIKey, err = NewWorkspaceKey(); err != nil {
		return err
	}

	ns := s.Namespace
	objects := SeedObjects(ns, Seed{
		APIKey:           s.APIKey,
		SigningPublicKey: PublicKeyBase64(signing),
		UpstreamURL:      s.UpstreamURL,
		ModelURL:         s.ModelURL,
		RegistryURL:      "http://" + s.RegistryHost + "/sandboxes",
	})
	if ns != "default" {
		objects = append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}}, objects...)
	}
	for _, obj := range objects {
		kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*")
		if err := s.poll(ctx, fmt.Sprintf("%s %s to be created", kind, obj.GetName()), func() error {
			err := s.Client.Create(ctx, obj)
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// writeEnv writes the shell file that points a terminal at the stack. It holds the admin key, so only the
// owner may read it.
func (s *Stack) writeEnv() error {
	s.EnvPath = filepath.Join(s.devDir, "env")
	lines := []string{
		"# Written by the modelgate local stack; source it: . " + s.EnvPath,
		"export MODELGATE_URL=" + s.GatewayURL,
		"export MODELGATE_API_KEY=" + s.APIKey,
		"export KUBECONFIG=" + s.KubeconfigPath,
		"export MODELGATE_NAMESPACE=" + s.Namespace,
		"export MODELGATE_REGISTRY=" + s.RegistryHost,
		// kubectl is built with the API server and is not on PATH otherwise.
		`export PATH="` + filepath.Dir(s.KubectlPath) + `:$PATH"`,
	}
	if err := os.WriteFile(s.EnvPath, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("failed to write %s: %w", s.EnvPath, err)
	}
	return nil
}

// Seed is what the seeded objects point at: the admin key's plaintext, the Workspace's key-registration public key
// (base64), the demo upstream's OpenAI base URL, the demo model server's base URL and the workspace's image
// registry URL.
type Seed struct {
	APIKey           string
	SigningPublicKey string
	UpstreamURL      string
	ModelURL         string
	RegistryURL      string
}

// SeedObjects are the objects the stack seeds in workspace ns, in the order they are created: the Workspace, the
// admin workspace key with its Secret, the demo Endpoint with its upstream Secret, the demo Model with its
// deployment (the deployment first, so the Model's admission finds what it points at), and the demo Chain with
// its two-chainlet deployment. The cluster suite installs the same objects on a real cluster.
func SeedObjects(ns string, p Seed) []client.Object {
	return []client.Object{
		&gatewayv1.Workspace{
			ObjectMeta: metav1.ObjectMeta{Name: WorkspaceName, Namespace: ns},
			Spec: gatewayv1.WorkspaceSpec{
				KeyRegistration: &gatewayv1.KeyRegistration{PublicKey: p.SigningPublicKey},
				AsyncWebhook:    &gatewayv1.AsyncWebhook{SecretRef: gatewayv1.SecretKeySelector{Name: AsyncWebhookSecretName}},
				ImageRegistry:   &gatewayv1.ImageRegistry{URL: p.RegistryURL},
			},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: AsyncWebhookSecretName, Namespace: ns},
			Data:       map[string][]byte{"secret": []byte(AsyncWebhookSecret)},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: AdminKeySecretName, Namespace: ns},
			Data:       map[string][]byte{"api_key": []byte(p.APIKey)},
		},
		&gatewayv1.WorkspaceAPIKey{
			ObjectMeta: metav1.ObjectMeta{Name: AdminKeyName, Namespace: ns},
			Spec: gatewayv1.WorkspaceAPIKeySpec{
				Type:        gatewayv1.KeyTypeManageAll,
				DisplayName: "admin",
				KeySource:   gatewayv1.KeySource{SecretRef: &gatewayv1.SecretKeySelector{Name: AdminKeySecretName, Key: "api_key"}},
			},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: UpstreamSecretName, Namespace: ns,
				Labels: map[string]string{gatewayv1.LabelUpstreamCredential: "true"},
				// The demo upstream's key goes to the demo upstream only (docs/security.md).
				Annotations: map[string]string{gatewayv1.AnnotationUpstreamHosts: hostOf(p.UpstreamURL)}},
			Data: map[string][]byte{"api_key": []byte(UpstreamAPIKey)},
		},
		&gatewayv1.Endpoint{
			ObjectMeta: metav1.ObjectMeta{Name: EndpointName, Namespace: ns},
			Spec: gatewayv1.EndpointSpec{
				Slug: EndpointSlug,
				Targets: []gatewayv1.EndpointTarget{{
					Provider:        gatewayv1.ProviderOpenAI,
					BaseURL:         p.UpstreamURL,
					APIKeySecretRef: &gatewayv1.SecretKeySelector{Name: UpstreamSecretName, Key: "api_key"},
					TargetModel:     EndpointModel,
				}},
			},
		},
		&gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: ModelDeploymentName, Namespace: ns},
			Spec: gatewayv1.ModelDeploymentSpec{
				ModelID: ModelName,
				Source:  gatewayv1.DeploymentSource{URL: p.ModelURL},
			},
		},
		&gatewayv1.Model{
			ObjectMeta: metav1.ObjectMeta{Name: ModelName, Namespace: ns},
			Spec: gatewayv1.ModelSpec{
				DisplayName: "Demo sentiment model",
				Environments: []gatewayv1.ModelEnvironment{
					{Name: gatewayv1.EnvironmentProduction, Deployment: ModelDeploymentName},
					{Name: ModelStagingEnv, Deployment: ModelDeploymentName},
				},
			},
		},
		&gatewayv1.ChainDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: ChainDeploymentName, Namespace: ns},
			Spec: gatewayv1.ChainDeploymentSpec{
				ChainID:    ChainName,
				Entrypoint: ChainEntrypoint,
				Chainlets: []gatewayv1.Chainlet{
					{Name: ChainEntrypoint, Source: gatewayv1.DeploymentSource{URL: p.ModelURL}},
					{Name: ChainOtherChainlet, Source: gatewayv1.DeploymentSource{URL: p.ModelURL}},
				},
			},
		},
		&gatewayv1.Chain{
			ObjectMeta: metav1.ObjectMeta{Name: ChainName, Namespace: ns},
			Spec: gatewayv1.ChainSpec{
				DisplayName:  "Demo chain",
				Environments: []gatewayv1.ChainEnvironment{{Name: gatewayv1.EnvironmentProduction, Deployment: ChainDeploymentName}},
			},
		},
	}
}

// hostOf is the host and port of rawURL, "" when it has none.
func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return u.Host
}
