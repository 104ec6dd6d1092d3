package gateway

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/kit"
)

// Field indexes of the keys, which only these reconcilers list by.
const (
	// IndexKeyPrefix indexes APIKeys and WorkspaceAPIKeys by every prefix they carry: spec.prefix and
	// status.prefix (derived from a Secret or a minted key).
	IndexKeyPrefix = "prefix"
	// IndexKeySecretRef indexes APIKeys and WorkspaceAPIKeys by spec.secretRef.name.
	IndexKeySecretRef = "spec.secretRef.name"
)

// Indexes are the field indexes the reconcilers of this package list by: groups by parent and external id,
// keys by group, prefix and Secret, endpoints by slug.
func Indexes() []kit.Index {
	return []kit.Index{
		{Object: &gatewayv1.Group{}, Field: gatewayv1.FieldGroupParent, Extract: func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.Group).ParentID())
		}},
		{Object: &gatewayv1.Group{}, Field: gatewayv1.FieldGroupExternalID, Extract: func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.Group).Spec.ExternalEntityID)
		}},
		{Object: &gatewayv1.APIKey{}, Field: gatewayv1.FieldAPIKeyGroup, Extract: func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.APIKey).Spec.GroupID)
		}},
		{Object: &gatewayv1.APIKey{}, Field: IndexKeyPrefix, Extract: func(o client.Object) []string {
			k := o.(*gatewayv1.APIKey)
			return kit.NonEmpty(k.Spec.Prefix, k.Status.Prefix)
		}},
		{Object: &gatewayv1.WorkspaceAPIKey{}, Field: IndexKeyPrefix, Extract: func(o client.Object) []string {
			k := o.(*gatewayv1.WorkspaceAPIKey)
			return kit.NonEmpty(k.Spec.Prefix, k.Status.Prefix)
		}},
		{Object: &gatewayv1.APIKey{}, Field: IndexKeySecretRef, Extract: func(o client.Object) []string {
			if ref := o.(*gatewayv1.APIKey).Spec.SecretRef; ref != nil {
				return kit.NonEmpty(ref.Name)
			}
			return nil
		}},
		{Object: &gatewayv1.WorkspaceAPIKey{}, Field: IndexKeySecretRef, Extract: func(o client.Object) []string {
			if ref := o.(*gatewayv1.WorkspaceAPIKey).Spec.SecretRef; ref != nil {
				return kit.NonEmpty(ref.Name)
			}
			return nil
		}},
		{Object: &gatewayv1.Endpoint{}, Field: gatewayv1.FieldEndpointSlug, Extract: func(o client.Object) []string {
			return kit.NonEmpty(o.(*gatewayv1.Endpoint).Spec.Slug)
		}},
	}
}
