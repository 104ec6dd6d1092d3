package webhooks

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// +kubebuilder:webhook:path=/mutate-gateway-modelgate-io-v1alpha1-group,mutating=true,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=groups,verbs=create;update,versions=v1alpha1,name=mgroup-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/mutate-gateway-modelgate-io-v1alpha1-apikey,mutating=true,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=apikeys,verbs=create;update,versions=v1alpha1,name=mapikey-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/mutate-gateway-modelgate-io-v1alpha1-workspaceapikey,mutating=true,failurePolicy=fail,sideEffects=None,groups=gateway.modelgate.io,resources=workspaceapikeys,verbs=create;update,versions=v1alpha1,name=mworkspaceapikey-v1alpha1.gateway.modelgate.io,admissionReviewVersions=v1

// ParentBinder is the mutating webhook that binds a Group or an APIKey to the group it is created under: on a
// create it writes that group's UID into gatewayv1.AnnotationParentUID (or removes the annotation when no such
// group exists yet, so a copied or restored manifest cannot bring a stale one); on an update it keeps the value
// the object was admitted with, whatever the request says, so that neither a user nor a server-side apply that
// does not list the annotation can change or drop it.
//
// The binding closes a race no list can: a child admitted a moment before its parent's deletion began may reach
// etcd after the parent's finalizer last looked for children. The group controller deletes an object whose
// bound group is gone, and the snapshot never serves one bound to another group of the same name.
//
// The same binder binds a team key (a WorkspaceAPIKey with spec.teamID) to its Team, in
// gatewayv1.AnnotationTeamUID: the translation serves a bound key only while that Team exists.
type ParentBinder[T client.Object] struct {
	// Reader reads the parent past any cache: a parent created a moment ago must be found.
	Reader client.Reader
	// Parent names the object obj is created under, or "" for none.
	Parent func(obj T) string
	// Kind is the parent's kind ("Group" when empty); Annotation the binding's (AnnotationParentUID when empty).
	Kind, Annotation string
}

// NewGroupBinder binds a Group to its parent group.
func NewGroupBinder(r client.Reader) *ParentBinder[*gatewayv1.Group] {
	return &ParentBinder[*gatewayv1.Group]{Reader: r, Parent: (*gatewayv1.Group).ParentID}
}

// NewAPIKeyBinder binds an APIKey to its group.
func NewAPIKeyBinder(r client.Reader) *ParentBinder[*gatewayv1.APIKey] {
	return &ParentBinder[*gatewayv1.APIKey]{Reader: r, Parent: func(k *gatewayv1.APIKey) string { return k.Spec.GroupID }}
}

// NewTeamKeyBinder binds a team key to its Team.
func NewTeamKeyBinder(r client.Reader) *ParentBinder[*gatewayv1.WorkspaceAPIKey] {
	return &ParentBinder[*gatewayv1.WorkspaceAPIKey]{Reader: r, Kind: "Team", Annotation: gatewayv1.AnnotationTeamUID,
		Parent: func(k *gatewayv1.WorkspaceAPIKey) string { return k.Spec.TeamID }}
}

var _ admission.Defaulter[*gatewayv1.Group] = &ParentBinder[*gatewayv1.Group]{}

// Default sets or keeps the binding of obj.
func (b *ParentBinder[T]) Default(ctx context.Context, obj T) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return fmt.Errorf("admission of %s: %w", obj.GetName(), err)
	}
	if req.Operation == admissionv1.Update {
		old := &metav1.PartialObjectMetadata{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("admission of %s: the stored object does not decode: %v", obj.GetName(), err))
		}
		b.setParentUID(obj, old.GetAnnotations()[b.annotation()])
		return nil
	}
	uid, err := b.parentUID(ctx, obj)
	if err != nil {
		return err
	}
	b.setParentUID(obj, uid)
	return nil
}

func (b *ParentBinder[T]) annotation() string {
	if b.Annotation == "" {
		return gatewayv1.AnnotationParentUID
	}
	return b.Annotation
}

// parentUID reads the UID of the group obj is created under, or "" when it names none or that group does not
// exist (yet).
func (b *ParentBinder[T]) parentUID(ctx context.Context, obj T) (string, error) {
	name := b.Parent(obj)
	if name == "" {
		return "", nil
	}
	parent := &metav1.PartialObjectMetadata{}
	kind := b.Kind
	if kind == "" {
		kind = "Group"
	}
	parent.SetGroupVersionKind(gatewayv1.GroupVersion.WithKind(kind))
	err := b.Reader.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, parent)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", apierrors.NewInternalError(fmt.Errorf("admission of %s: failed to read %s %s: %w", obj.GetName(), kind, name, err))
	}
	return string(parent.GetUID()), nil
}

// setParentUID writes uid into obj's binding annotation, or removes the annotation when uid is empty.
func (b *ParentBinder[T]) setParentUID(obj client.Object, uid string) {
	a := obj.GetAnnotations()
	if uid == "" {
		if _, ok := a[b.annotation()]; ok {
			delete(a, b.annotation())
			obj.SetAnnotations(a)
		}
		return
	}
	if a == nil {
		a = map[string]string{}
	}
	a[b.annotation()] = uid
	obj.SetAnnotations(a)
}
