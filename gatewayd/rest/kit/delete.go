package kit

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DeleteOnce starts the deletion of obj, as read (not being deleted), and reports whether this call started it,
// so that of concurrent DELETEs of one object exactly one answers that it deleted it and the others 404. An
// object with a finalizer stays while it is being deleted, and a second delete of it succeeds again, so success
// alone does not tell; each delete carries the resourceVersion read. A conflict reads the object again: gone or
// being deleted, another call started the deletion (false); otherwise it changed meanwhile (a status write), and
// the delete is sent again with its new resourceVersion. obj holds the object as last read.
func DeleteOnce(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
	started := false
	err := retry.RetryOnConflict(updateBackoff, func() error {
		uid, rv := obj.GetUID(), obj.GetResourceVersion()
		err := c.Delete(ctx, obj, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		if err == nil {
			started = true
			return nil
		}
		if !apierrors.IsConflict(err) {
			return client.IgnoreNotFound(err)
		}
		if gerr := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); gerr != nil {
			return client.IgnoreNotFound(gerr)
		}
		if obj.GetDeletionTimestamp() != nil || obj.GetUID() != uid {
			return nil
		}
		return err
	})
	if apierrors.IsConflict(err) {
		return false, ErrBusy
	}
	return started, err
}
