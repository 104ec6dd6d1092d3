package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/test/stack"
	"github.com/modelgate/modelgate/test/upstream"
)

// The release the harness installs, and the workspace it seeds.
const (
	ReleaseName      = "modelgate"
	ReleaseNamespace = "modelgate-system"
	// WorkspaceNamespace is the seeded workspace, as `make run` seeds namespace default.
	WorkspaceNamespace = "default"
	// Client ports on ClientIP: the demo upstream, the demo model server and the workspace's image registry.
	upstreamPort = "9999"
	modelPort    = "9998"
	registryPort = "5000"
	// sandboxUploadSecret holds the key that signs sandbox upload URLs (gatewayd.sandboxUploadKeySecret).
	sandboxUploadSecret = "modelgate-sandbox-upload"
)

// Product is the chart installed on the cluster, seeded like `make run`: a Workspace with an admin key, the demo
// Endpoint, Model and Chain, whose upstream, model server and image registry run in this process, listening on
// ClientIP inside the namespace.
type Product struct {
	// GatewayURL is gatewayd's Service, http://<ClusterIP>:80, reachable from inside the namespace.
	GatewayURL string
	// APIKey is the admin workspace key (WORKSPACE_MANAGE_ALL).
	APIKey string
	// Client reaches the API server as the cluster admin, from inside the namespace.
	Client client.Client
	// HTTP dials inside the namespace: use it for every call to GatewayURL and to pods.
	HTTP *http.Client
	// Upstream is the demo OpenAI-compatible upstream the seeded Endpoint routes to.
	Upstream *upstream.Server
	// ModelURL, UpstreamURL and RegistryHost are where the in-process servers listen.
	ModelURL, UpstreamURL, RegistryHost string
	// InstallDuration is how long `helm install` took until every pod was Ready.
	InstallDuration time.Duration

	dir   string
	stops []func()
	// hold, when set, holds the registry's requests it matches (HoldRegistry).
	hold atomic.Pointer[RegistryHold]
}

// RegistryHold holds the registry's requests that match until Release. A held request whose client leaves
// meanwhile (its connection closed: the client process died) is dropped, never served.
type RegistryHold struct {
	match    func(*http.Request) bool
	released chan struct{}
	held     atomic.Int32
	dropped  atomic.Int32
}

// Held is how many requests the hold has held; Dropped how many of them it dropped because their client left.
func (h *RegistryHold) Held() int    { return int(h.held.Load()) }
func (h *RegistryHold) Dropped() int { return int(h.dropped.Load()) }

// HoldRegistry starts holding the registry's requests that match, until the hold's Release.
func (p *Product) HoldRegistry(match func(*http.Request) bool) *RegistryHold {
	h := &RegistryHold{match: match, released: make(chan struct{})}
	p.hold.Store(h)
	return h
}

// Release serves the held requests whose client is still there, and holds no more.
func (p *Product) Release(h *RegistryHold) {
	p.hold.CompareAndSwap(h, nil)
	close(h.released)
}

// holding serves h, except the requests a hold in force matches, which wait for its release.
func (p *Product) holding(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hold := p.hold.Load(); hold != nil && hold.match(r) {
			// Read the body first: only then does the server watch the connection, and end the request's context
			// when the client goes.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			hold.held.Add(1)
			select {
			case <-hold.released:
			case <-r.Context().Done():
			}
			if r.Context().Err() != nil {
				hold.dropped.Add(1)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// InstallOptions say where the chart and helm are.
type InstallOptions struct {
	// Root is the repository root (charts/modelgate).
	Root string
	// Helm is the helm binary.
	Helm string
	// Values are extra values files, after the harness's own.
	Values []string
}

// Install serves the demo upstream, model and registry on ClientIP, installs the chart with the harness's
// values, waits for every pod to be Ready, and seeds the workspace.
func (c *Cluster) Install(ctx context.Context, opts InstallOptions) (_ *Product, err error) {
	p := &Product{dir: c.Dir, HTTP: &http.Client{Transport: &http.Transport{DialContext: c.Netns.DialContext}, Timeout: 2 * time.Minute}}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	if p.Client, err = client.New(c.Config, client.Options{Scheme: stack.Scheme()}); err != nil {
		return p, err
	}
	if err := p.serveClients(c); err != nil {
		return p, err
	}
	if err := c.prepareRelease(ctx); err != nil {
		return p, err
	}
	valuesFile := filepath.Join(c.Dir, "values.yaml")
	if err := os.WriteFile(valuesFile, []byte(harnessValues), 0o644); err != nil {
		return p, err
	}
	args := []string{"install", ReleaseName, filepath.Join(opts.Root, "charts", "modelgate"),
		"--namespace", ReleaseNamespace, "--create-namespace", "--values", valuesFile, "--wait", "--timeout", "5m"}
	for _, v := range opts.Values {
		args = append(args, "--values", v)
	}
	start := time.Now()
	if out, err := c.Exec(ctx, opts.Helm, args...); err != nil {
		return p, fmt.Errorf("helm install failed: %w\n%s\nmanager log:\n%s", err, out, c.PodLogs(ctx, ReleaseNamespace, "app.kubernetes.io/component=manager"))
	}
	if err := c.WaitPodsReady(ctx, ReleaseNamespace); err != nil {
		return p, err
	}
	p.InstallDuration = time.Since(start)
	svc := &corev1.Service{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: ReleaseNamespace, Name: ReleaseName + "-gatewayd"}, svc); err != nil {
		return p, fmt.Errorf("failed to read gatewayd's Service: %w", err)
	}
	p.GatewayURL = "http://" + net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port))
	if err := p.seed(ctx); err != nil {
		return p, err
	}
	return p, p.waitGateway(ctx)
}

// harnessValues are the chart values of the harness's install: the local image (never pulled), the operator's
// allowances for a workspace whose registry and webhook receivers live on private addresses (ClientIP), a
// sandbox upload key, and Secret access by namespace, since the tour creates upstream Secrets through the API.
const harnessValues = `image:
  repository: ` + ImageRepository + `
  tag: ` + ImageTag + `
  pullPolicy: Never
manager:
  extraArgs: [--sandbox-allow-internal-images]
gatewayd:
  secretAccess: namespace
  sandboxUploadKeySecret: ` + sandboxUploadSecret + `
  extraArgs: [--async-allow-internal-webhooks, --sandbox-allow-internal-images]
store:
  embedded:
    persistence:
      size: 1Gi
`

// prepareRelease makes what the chart expects to find: the release namespace, the sandbox upload key Secret, and
// a PersistentVolume for gatewayd's embedded store (a one-node cluster has no volume provisioner; a hostPath
// volume in the cluster's directory, owned by the image's user, stands in for one).
func (c *Cluster) prepareRelease(ctx context.Context) error {
	cl, err := client.New(c.Config, client.Options{Scheme: stack.Scheme()})
	if err != nil {
		return err
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	pvDir := filepath.Join(c.Dir, "pv", "gatewayd-state")
	if err := os.MkdirAll(pvDir, 0o750); err != nil {
		return err
	}
	if err := os.Chown(pvDir, 65532, 65532); err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ReleaseNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sandboxUploadSecret, Namespace: ReleaseNamespace},
			Data: map[string][]byte{"key": []byte(base64.StdEncoding.EncodeToString(key))}},
		&corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "modelgate-cluster-state"},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
			},
		},
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// Exec runs a program inside the namespace with KUBECONFIG set to the admin's, and answers its output.
func (c *Cluster) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := c.Netns.Command(ctx, name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.AdminKubeconfig, "HOME="+c.Dir)
	return cmd.CombinedOutput()
}

// Kubectl runs the cluster's kubectl inside the namespace.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	return c.Exec(ctx, filepath.Join(c.opts.BinDir, "kubectl"), args...)
}

// PodLogs answers the logs of the pods matching selector, for failure messages.
func (c *Cluster) PodLogs(ctx context.Context, namespace, selector string) string {
	out, _ := c.Kubectl(ctx, "logs", "-n", namespace, "-l", selector, "--tail=60", "--all-containers")
	return string(out)
}

// WaitPodsReady waits until every pod of namespace is Ready.
func (c *Cluster) WaitPodsReady(ctx context.Context, namespace string) error {
	return c.poll(ctx, "pods of "+namespace+" Ready", 5*time.Minute, func() error {
		pods, err := c.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return errors.New("no pods yet")
		}
		var notReady []string
		for _, pod := range pods.Items {
			if !podReady(&pod) {
				notReady = append(notReady, pod.Name+" ("+string(pod.Status.Phase)+")")
			}
		}
		if len(notReady) > 0 {
			return fmt.Errorf("not Ready: %s", strings.Join(notReady, ", "))
		}
		return nil
	})
}

func podReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// serveClients starts the demo upstream, the demo model server and the image registry on ClientIP.
func (p *Product) serveClients(c *Cluster) error {
	p.Upstream = upstream.New(upstream.Options{})
	p.stops = append(p.stops, p.Upstream.Close)
	up, err := c.Netns.Listen("tcp", net.JoinHostPort(ClientIP, upstreamPort))
	if err != nil {
		return fmt.Errorf("failed to listen for the demo upstream: %w", err)
	}
	p.UpstreamURL = "http://" + up.Addr().String() + "/v1"
	p.serve(up, p.Upstream.Handler())

	ml, err := c.Netns.Listen("tcp", net.JoinHostPort(ClientIP, modelPort))
	if err != nil {
		return fmt.Errorf("failed to listen for the demo model: %w", err)
	}
	url, stop := stack.ServeDemoModel(ml, stack.ModelDeploymentName)
	p.ModelURL = url
	p.stops = append(p.stops, stop)

	rl, err := c.Netns.Listen("tcp", net.JoinHostPort(ClientIP, registryPort))
	if err != nil {
		return fmt.Errorf("failed to listen for the image registry: %w", err)
	}
	blobs := filepath.Join(c.Dir, "registry")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return err
	}
	p.RegistryHost = rl.Addr().String()
	p.serve(rl, p.holding(stack.Registry(blobs)))
	return nil
}

func (p *Product) serve(l net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }() // http.ErrServerClosed on stop
	p.stops = append(p.stops, func() { _ = srv.Close() })
}

// Stop closes the in-process servers. The cluster's Down removes the release with everything else.
func (p *Product) Stop() {
	for i := len(p.stops) - 1; i >= 0; i-- {
		p.stops[i]()
	}
	p.stops = nil
}

// seed creates the workspace's objects, as `make run` does, retrying while the admission webhooks warm up.
func (p *Product) seed(ctx context.Context) error {
	var err error
	if p.APIKey, err = stack.NewWorkspaceKey(); err != nil {
		return err
	}
	signing, err := stack.LoadOrCreateSigningKey(filepath.Join(p.dir, stack.SigningKeyFile))
	if err != nil {
		return err
	}
	objs := stack.SeedObjects(WorkspaceNamespace, stack.Seed{
		APIKey:           p.APIKey,
		SigningPublicKey: stack.PublicKeyBase64(signing),
		UpstreamURL:      p.UpstreamURL,
		ModelURL:         p.ModelURL,
		RegistryURL:      "http://" + p.RegistryHost + "/sandboxes",
	})
	for _, o := range objs {
		deadline := time.Now().Add(time.Minute)
		for {
			err := p.Client.Create(ctx, o)
			if err == nil || apierrors.IsAlreadyExists(err) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("failed to create %T %s: %w", o, o.GetName(), err)
			}
			time.Sleep(time.Second)
		}
	}
	return nil
}

// waitGateway waits until gatewayd, through its Service, answers the admin key on the management API: the
// snapshot with the key is loaded.
func (p *Product) waitGateway(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.GatewayURL+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+p.APIKey)
		resp, err := p.HTTP.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /v1/models answered %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gatewayd did not serve the seeded workspace through its Service: %w", err)
		}
		time.Sleep(time.Second)
	}
}
