// Package controllers registers the manager's reconcilers, which live by concern in its sub-packages: gateway
// (groups, keys, endpoints, the snapshot materializer), models (models, deployments, environments, chains),
// workspace (workspaces, teams, deprovisioning, key creators) and sandboximage (sandbox image builds), all on
// the prelude and helpers of kit. Each kind has its own reconciler that writes that object's status. The
// materializer rebuilds the snapshot of a whole workspace with the pure translation in package translate and
// publishes it in ConfigMaps for gatewayd. SetupWithManager registers all of them, and the field indexes they
// list by, on a manager.
package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/controllers/autoscale"
	"github.com/modelgate/modelgate/controllers/gateway"
	"github.com/modelgate/modelgate/controllers/models"
	"github.com/modelgate/modelgate/controllers/sandboximage"
	"github.com/modelgate/modelgate/controllers/workspace"
)

// LeaderElectionID is the Lease every manager replica competes for: the name label of its
// leader_election_master_status series, which the chart's manager alert reads (docs/operations.md, Alerts).
const LeaderElectionID = "modelgate-manager.gateway.modelgate.io"

// Options tunes the reconcilers. The zero value is what production runs.
type Options struct {
	// SnapshotChunkBytes caps the payload bytes of one snapshot ConfigMap. Zero means snapshot.MaxChunkBytes.
	SnapshotChunkBytes int

	// Probe checks the readiness of url-source deployments; models.HTTPProber(nil) when nil.
	Probe models.Prober
	// ProbeInterval is how often a url source is probed; models.DefaultProbeInterval when zero.
	ProbeInterval time.Duration

	// Clock times the ModelDeployment reconciler's deploy and wake deadlines; the real clock when nil. Tests pass
	// the fake clock they give the Autoscaler too.
	Clock clock.PassiveClock

	// Autoscaler, when set, runs on the leader and scales model deployments to the calls gatewayd reports; its
	// Client and Reader default to the manager's. Nil runs none: deployments then run minReplica (at least one)
	// until scaled down by promotion, and one while a wake is pending.
	Autoscaler *autoscale.Autoscaler

	// Sandbox configures the SandboxImageBuild reconciler (imports and builds of sandbox images).
	Sandbox sandboximage.Options

	// SkipNameValidation lets a test process start more than one manager with these controllers. The manager's
	// own Controller.SkipNameValidation is honoured as well.
	SkipNameValidation bool

	// Tracer gives each reconcile of Groups, Endpoints and ModelDeployments a span, where a slow propagation needs
	// explaining (docs/operations.md "Traces"); none when nil.
	Tracer *tracing.Tracer
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
	for _, ix := range slices.Concat(gateway.Indexes(), models.Indexes()) {
		// Webhooks and other readers of the same cache may list with these; they must not register them again.
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), ix.Object, ix.Field, ix.Extract); err != nil {
			return fmt.Errorf("failed to index %T by %s: %w", ix.Object, ix.Field, err)
		}
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
			return (&gateway.GroupReconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("modelgate-manager"),
				Tracer: opts.Tracer}).SetupWithManager(mgr, copts)
		}},
		{"APIKey", func() error { return gateway.NewAPIKeyReconciler(mgr).SetupWithManager(mgr, copts) }},
		{"WorkspaceAPIKey", func() error { return gateway.NewWorkspaceAPIKeyReconciler(mgr).SetupWithManager(mgr, copts) }},
		{"workspaceapikey-nameclaim", func() error {
			return (&gateway.KeyNameClaimReconciler{Client: c, Reader: mgr.GetAPIReader()}).SetupWithManager(mgr, copts)
		}},
		{"Endpoint", func() error {
			r := gateway.NewEndpointReconciler(c)
			r.Tracer = opts.Tracer
			return r.SetupWithManager(mgr, copts)
		}},
		{"Workspace", func() error { return workspace.NewWorkspaceReconciler(c).SetupWithManager(mgr, copts) }},
		{"Model", func() error { return (&models.ModelReconciler{Client: c}).SetupWithManager(mgr, copts) }},
		{"ModelDeployment", func() error {
			return (&models.ModelDeploymentReconciler{Client: c, Recorder: mgr.GetEventRecorderFor("modelgate-manager"),
				Clock: opts.Clock, Probe: opts.Probe, ProbeInterval: opts.ProbeInterval, Tracer: opts.Tracer}).SetupWithManager(mgr, copts)
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
		{"Team", func() error { return workspace.NewTeamReconciler(c).SetupWithManager(mgr, copts) }},
		{"Chain", func() error { return (&models.ChainReconciler{Client: c}).SetupWithManager(mgr, copts) }},
		{"ChainDeployment", func() error {
			return (&models.ChainDeploymentReconciler{Client: c, Recorder: mgr.GetEventRecorderFor("modelgate-manager")}).SetupWithManager(mgr, copts)
		}},
		{"deprovision", func() error {
			return (&workspace.DeprovisionReconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("modelgate-manager")}).SetupWithManager(mgr, copts)
		}},
		{"workspaceapikey-createdby", func() error {
			return (&workspace.KeyCreatorReconciler{Client: c, Recorder: mgr.GetEventRecorderFor("modelgate-manager")}).SetupWithManager(mgr, copts)
		}},
		{"SandboxImageBuild", func() error {
			return (&sandboximage.SandboxImageBuildReconciler{Client: c, Reader: mgr.GetAPIReader(), Opts: opts.Sandbox, Clock: opts.Clock}).SetupWithManager(mgr, copts)
		}},
		{"snapshot", func() error {
			return (&gateway.SnapshotReconciler{Client: c, Reader: mgr.GetAPIReader(), ChunkBytes: opts.SnapshotChunkBytes}).SetupWithManager(mgr, copts)
		}},
	} {
		if err := s.setup(); err != nil {
			return fmt.Errorf("failed to set up the %s controller: %w", s.name, err)
		}
	}
	return nil
}
