package models

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
)

// IndexDeploymentService indexes ModelDeployments by the Service gatewayd routes them to (the one a container
// source creates, or a service source's), so an EndpointSlice change reaches the deployments behind it.
const IndexDeploymentService = "routing.service"

// Indexes are the field indexes the reconcilers of this package list by: deployments by model and by routed
// Service, chain deployments by chain.
func Indexes() []kit.Index {
	return []kit.Index{
		{Object: &gatewayv1.ModelDeployment{}, Field: gatewayv1.FieldDeploymentModel, Extract: func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.ModelDeployment).Spec.ModelID)
		}},
		{Object: &gatewayv1.ModelDeployment{}, Field: IndexDeploymentService, Extract: func(o client.Object) []string {
			return kit.NonEmpty(routedService(o.(*gatewayv1.ModelDeployment)))
		}},
		{Object: &gatewayv1.ChainDeployment{}, Field: gatewayv1.FieldChainDeploymentChain, Extract: func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.ChainDeployment).Spec.ChainID)
		}},
	}
}
