package translate

import (
	"slices"
	"strings"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// translateModels lists the models that are not being deleted, each with its environments in spec order.
func translateModels(in []gatewayv1.Model) []snapshot.ServedModel {
	out := []snapshot.ServedModel{}
	for i := range in {
		m := &in[i]
		if m.DeletionTimestamp != nil {
			continue
		}
		sm := snapshot.ServedModel{ID: m.Name, TeamID: m.Spec.TeamID, Development: m.Spec.Development,
			Environments: make([]snapshot.EnvironmentRoute, len(m.Spec.Environments))}
		for j, e := range m.Spec.Environments {
			sm.Environments[j] = snapshot.EnvironmentRoute{Name: e.Name, Deployment: e.Deployment}
		}
		out = append(out, sm)
	}
	slices.SortFunc(out, func(a, b snapshot.ServedModel) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// translateDeployments lists the deployments that are not being deleted and how gatewayd reaches each: a url
// source at its URL, a container source at the Service the manager created for it, a service source at its
// Service on the port the manager resolved.
func translateDeployments(in []gatewayv1.ModelDeployment) []snapshot.Deployment {
	out := []snapshot.Deployment{}
	for i := range in {
		md := &in[i]
		if md.DeletionTimestamp != nil {
			continue
		}
		d := snapshot.Deployment{ID: md.Name, ModelID: md.Spec.ModelID, PredictPath: md.Spec.PredictPath,
			Active: md.Spec.IsActive(), Status: string(md.Status.Status), StartupTimeoutSeconds: md.Spec.StartupTimeoutSeconds,
			Ready: md.Status.Status == gatewayv1.StatusActive || md.Status.Status == gatewayv1.StatusUpdating}
		if a := md.Spec.Autoscaling; a != nil {
			if a.ConcurrencyTarget != nil {
				d.ConcurrencyTarget = *a.ConcurrencyTarget
			}
			if a.MaxReplica != nil {
				d.MaxReplica = *a.MaxReplica
			}
		}
		switch src := md.Spec.Source; {
		case src.URL != "":
			d.Kind, d.URL = snapshot.DeploymentURL, strings.TrimRight(src.URL, "/")
		case src.Container != nil:
			d.Kind, d.Service, d.PortName = snapshot.DeploymentService, md.WorkloadName(), gatewayv1.ModelPortName
		case src.Service != nil:
			d.Kind, d.Service, d.PortName = snapshot.DeploymentService, src.Service.Name, md.Status.PortName
		default:
			continue
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b snapshot.Deployment) int { return strings.Compare(a.ID, b.ID) })
	return out
}
