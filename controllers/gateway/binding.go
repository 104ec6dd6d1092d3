package gateway

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// boundGroupRecheck is how soon an object whose bound group is being deleted is looked at again: that group's
// finalizer deletes it, or it finds the group gone.
const boundGroupRecheck = 2 * time.Second

// bound is what an object's binding (gatewayv1.AnnotationParentUID) says of the group it was admitted under.
type bound int

const (
	// boundAlive: no binding, or the bound group exists and is not being deleted.
	boundAlive bound = iota
	// boundDeleting: the bound group exists and is being deleted.
	boundDeleting
	// boundGone: the bound group does not exist, or a group of the same name with another UID does.
	boundGone
)

// boundGroup reads the group named group that obj was admitted under. The cache answers when it shows that group
// alive; anything else is confirmed past it (api), since a group created a moment ago may not be in the cache yet
// and one deleted a moment ago may still be.
func boundGroup(ctx context.Context, cache, api client.Reader, obj client.Object, group string) (bound, error) {
	uid := obj.GetAnnotations()[gatewayv1.AnnotationParentUID]
	if uid == "" || group == "" {
		return boundAlive, nil
	}
	key := client.ObjectKey{Namespace: obj.GetNamespace(), Name: group}
	// A typed read: a metadata-only one would start a second informer on Groups in the manager's cache.
	g := &gatewayv1.Group{}
	err := cache.Get(ctx, key, g)
	if err == nil && string(g.GetUID()) == uid && g.GetDeletionTimestamp().IsZero() {
		return boundAlive, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return boundAlive, fmt.Errorf("failed to read Group %s: %w", key, err)
	}
	if api != nil {
		err = api.Get(ctx, key, g)
		if err != nil && !apierrors.IsNotFound(err) {
			return boundAlive, fmt.Errorf("failed to read Group %s: %w", key, err)
		}
	}
	switch {
	case apierrors.IsNotFound(err), string(g.GetUID()) != uid:
		return boundGone, nil
	case !g.GetDeletionTimestamp().IsZero():
		return boundDeleting, nil
	}
	return boundAlive, nil
}

// deleteUnbound deletes obj (a Group or an APIKey of kind) when the group it was admitted under is gone: it was
// admitted as that group's deletion began and reached etcd after the finalizer last looked, or that group was
// deleted and another of the same name created since. It reports whether it deleted obj, and asks for a look
// again while the bound group is being deleted.
func deleteUnbound(ctx context.Context, c client.Client, api client.Reader, rec record.EventRecorder, obj client.Object, kind, group string) (bool, ctrl.Result, error) {
	b, err := boundGroup(ctx, c, api, obj, group)
	switch {
	case err != nil:
		return false, ctrl.Result{}, err
	case b == boundDeleting:
		return false, ctrl.Result{RequeueAfter: boundGroupRecheck}, nil
	case b == boundAlive:
		return false, ctrl.Result{}, nil
	}
	msg := fmt.Sprintf("Group %s, which this %s was created under, is gone; the %s is deleted with it.", group, kind, kind)
	if err := c.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
		return false, ctrl.Result{}, fmt.Errorf("failed to delete %s %s/%s, whose group is gone: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	logf.FromContext(ctx).Info("Deleted an object whose group is gone", "kind", kind, "group", group)
	if rec != nil {
		rec.Event(obj, corev1.EventTypeNormal, gatewayv1.ReasonBoundGroupGone, msg)
	}
	return true, ctrl.Result{}, nil
}
