// Package controllers holds the manager's reconcilers. Each kind has its own reconciler that writes that
// object's status (a Group's effective models, a key's derived prefix and hash, Ready conditions) and, for
// Groups, cascades deletion through a finalizer. One more reconciler, the materializer, rebuilds the snapshot of
// a whole workspace with the pure translation in package translate and publishes it in ConfigMaps for gatewayd.
// SetupWithManager registers all of them, and the field indexes they share, on a manager.
package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/autoscale"
	"github.com/modelgate/modelgate/controllers/kit"
)

// Field indexes registered on the manager's cache. Webhooks and other readers of the same cache may list with
// them (client.MatchingFields{gatewayv1.FieldGroupParent: "acme"}); they must not register the same names again.
const (
	// IndexKeyPrefix indexes APIKeys and WorkspaceAPIKeys by every prefix they carry: spec.prefix and
	// status.prefix (derived from a Secret or a minted key).
	IndexKeyPrefix = "prefix"
	// IndexKeySecretRef indexes APIKeys and WorkspaceAPIKeys by spec.secretRef.name.
	IndexKeySecretRef = "spec.secretRef.name"
)

// Options tunes the reconcilers. The zero value is what production runs.
type Options struct {
	// SnapshotChunkBytes caps the payload bytes of one snapshot ConfigMap. Zero means snapshot.MaxChunkBytes.
	SnapshotChunkBytes int

	// Probe checks the readiness of url-source deployments; HTTPProber(nil) when nil.
	Probe Prober
	// ProbeInterval is how often a url source is probed; DefaultProbeInterval when zero.
	ProbeInterval time.Duration

	// Clock times the ModelDeployment reconciler's deploy and wake deadlines; the real clock when nil. Tests pass
	// the fake clock they give the Autoscaler too.
	Clock clock.PassiveClock

	// Autoscaler, when set, runs on the leader and scales model deployments to the calls gatewayd reports; its
	// Client and Reader default to the manager's. Nil runs none: deployments then run minReplica (at least one)
	// until scaled down by promotion, and one while a wake is pending.
	Autoscaler *autoscale.Autoscaler

	// Sandbox configures the SandboxImageBuild reconciler (imports and builds of sandbox images).
	Sandbox SandboxOptions

	// SkipNameValidation lets a test process start more than one manager with these controllers. The manager's
	// own Controller.SkipNameValidation is honoured as well.
	SkipNameValidation bool
}

// The manager's ClusterRole, generated into config/rbac/role.yaml.
//
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=groups;apikeys,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=workspaces;workspaceapikeys;endpoints,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=groups/status;apikeys/status;workspaces/status;workspaceapikeys/status;endpoints/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=groups/finalizers,verbs=update
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=models;modeldeployments;teams,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=models/status;modeldeployments/status;teams/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=workspaceapikeys,verbs=delete
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=modeldeployments/finalizers,verbs=update
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=chains;chaindeployments,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=chains/status;chaindeployments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=chains/finalizers;chaindeployments/finalizers,verbs=update
// +kubebuilder:rbac:groups=gateway.modelgate.io,resources=modeldeployments,verbs=create;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// SetupWithManager registers the field indexes and every reconciler on mgr.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if opts.SnapshotChunkBytes <= 0 {
		opts.SnapshotChunkBytes = snapshot.MaxChunkBytes
	}
	if err := setupIndexes(context.Background(), mgr); err != nil {
		return err
	}
	// Left nil unless asked for, so the manager's own controller defaults still apply.
	var copts controller.Options
	if opts.SkipNameValidation {
		copts.SkipNameValidation = ptr.To(true)
	}
	c := mgr.GetClient()
	for _, s := range []struct {
		name  string
		setup func() error
	}{
		{"Group", func() error {
			return (&GroupReconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("modelgate-manager")}).setup(mgr, copts)
		}},
		{"APIKey", func() error { return newAPIKeyReconciler(mgr).setup(mgr, copts) }},
		{"WorkspaceAPIKey", func() error { return newWorkspaceAPIKeyReconciler(mgr).setup(mgr, copts) }},
		{"Endpoint", func() error { return (&EndpointReconciler{Client: c}).setup(mgr, copts) }},
		{"Workspace", func() error { return (&WorkspaceReconciler{Client: c}).setup(mgr, copts) }},
		{"Model", func() error { return (&ModelReconciler{Client: c}).setup(mgr, copts) }},
		{"ModelDeployment", func() error {
			return (&ModelDeploymentReconciler{Client: c, Recorder: mgr.GetEventRecorderFor("modelgate-manager"),
				Clock: opts.Clock, Probe: opts.Probe, ProbeInterval: opts.ProbeInterval}).setup(mgr, copts)
		}},
		{"autoscaler", func() error {
			a := opts.Autoscaler
			if a == nil {
				return nil
			}
			if a.Client == nil {
				a.Client = c
			}
			if a.Reader == nil {
				a.Reader = mgr.GetAPIReader()
			}
			if a.Recorder == nil {
				a.Recorder = mgr.GetEventRecorderFor("modelgate-autoscaler")
			}
			return mgr.Add(a)
		}},
		{"Team", func() error { return (&TeamReconciler{Client: c}).setup(mgr, copts) }},
		{"Chain", func() error { return (&ChainReconciler{Client: c}).setup(mgr, copts) }},
		{"ChainDeployment", func() error {
			return (&ChainDeploymentReconciler{Client: c, Recorder: mgr.GetEventRecorderFor("modelgate-manager")}).setup(mgr, copts)
		}},
		{"deprovision", func() error {
			return (&DeprovisionReconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("modelgate-manager")}).setup(mgr, copts)
		}},
		{"workspaceapikey-createdby", func() error {
			return (&KeyCreatorReconciler{Client: c, Recorder: mgr.GetEventRecorderFor("modelgate-manager")}).setup(mgr, copts)
		}},
		{"SandboxImageBuild", func() error {
			return (&SandboxImageBuildReconciler{Client: c, Reader: mgr.GetAPIReader(), Opts: opts.Sandbox, Clock: opts.Clock}).setup(mgr, copts)
		}},
		{"snapshot", func() error {
			return (&SnapshotReconciler{Client: c, Reader: mgr.GetAPIReader(), ChunkBytes: opts.SnapshotChunkBytes}).setup(mgr, copts)
		}},
	} {
		if err := s.setup(); err != nil {
			return fmt.Errorf("failed to set up the %s controller: %w", s.name, err)
		}
	}
	return nil
}

func setupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	indexer := mgr.GetFieldIndexer()
	indexes := []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&gatewayv1.Group{}, gatewayv1.FieldGroupParent, func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.Group).ParentID())
		}},
		{&gatewayv1.Group{}, gatewayv1.FieldGroupExternalID, func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.Group).Spec.ExternalEntityID)
		}},
		{&gatewayv1.APIKey{}, gatewayv1.FieldAPIKeyGroup, func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.APIKey).Spec.GroupID)
		}},
		{&gatewayv1.APIKey{}, IndexKeyPrefix, func(o client.Object) []string {
			k := o.(*gatewayv1.APIKey)
			return kit.NonEmpty(k.Spec.Prefix, k.Status.Prefix)
		}},
		{&gatewayv1.WorkspaceAPIKey{}, IndexKeyPrefix, func(o client.Object) []string {
			k := o.(*gatewayv1.WorkspaceAPIKey)
			return kit.NonEmpty(k.Spec.Prefix, k.Status.Prefix)
		}},
		{&gatewayv1.APIKey{}, IndexKeySecretRef, func(o client.Object) []string {
			if ref := o.(*gatewayv1.APIKey).Spec.SecretRef; ref != nil {
				return kit.NonEmpty(ref.Name)
			}
			return nil
		}},
		{&gatewayv1.WorkspaceAPIKey{}, IndexKeySecretRef, func(o client.Object) []string {
			if ref := o.(*gatewayv1.WorkspaceAPIKey).Spec.SecretRef; ref != nil {
				return kit.NonEmpty(ref.Name)
			}
			return nil
		}},
		{&gatewayv1.ModelDeployment{}, gatewayv1.FieldDeploymentModel, func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.ModelDeployment).Spec.ModelID)
		}},
		{&gatewayv1.ModelDeployment{}, IndexDeploymentService, func(o client.Object) []string {
			return kit.NonEmpty(routedService(o.(*gatewayv1.ModelDeployment)))
		}},
		{&gatewayv1.ChainDeployment{}, gatewayv1.FieldChainDeploymentChain, func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.ChainDeployment).Spec.ChainID)
		}},
		{&gatewayv1.Endpoint{}, gatewayv1.FieldEndpointSlug, func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.Endpoint).Spec.Slug)
		}},
	}
	for _, ix := range indexes {
		if err := indexer.IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("failed to index %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}
