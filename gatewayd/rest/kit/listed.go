package kit

import (
	"context"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// listedPoll is how often AwaitListed and AwaitUnlisted look at the list cache: an informer applies a watch event within
// milliseconds of the write.
const listedPoll = 2 * time.Millisecond

// AwaitListed waits, up to the read-your-writes timeout, until the list routes' cache (Options.Lister) holds obj
// as it was written (its resourceVersion or a later one), so a list right after a write's answer shows the write.
// A route calls it after a write whose answer waits for nothing else (a key's rename, since a name is not in
// the snapshot; a model's create and PATCH, a deployment's activation and retry). Without a Lister the lists
// read the API server, and there is nothing to wait for. On timeout it answers anyway, as AwaitSnapshot does.
func (k *Kit) AwaitListed(ctx context.Context, obj client.Object) {
	written, ok := resourceVersion(obj)
	if !ok {
		return
	}
	k.awaitCache(ctx, obj, "write", func(cached client.Object, err error) bool {
		rv, ok := resourceVersion(cached)
		return err == nil && ok && rv >= written
	})
}

// AwaitUnlisted is AwaitListed for a delete: it waits, up to the read-your-writes timeout, until the list routes'
// cache no longer holds obj as live: absent, marked for deletion (the lists leave those out while a finalizer
// holds them), or replaced by another object of the same name (another UID). On timeout it answers anyway.
func (k *Kit) AwaitUnlisted(ctx context.Context, obj client.Object) {
	k.awaitCache(ctx, obj, "delete", func(cached client.Object, err error) bool {
		return apierrors.IsNotFound(err) ||
			err == nil && (cached.GetDeletionTimestamp() != nil || cached.GetUID() != obj.GetUID())
	})
}

// awaitCache reads obj from the list routes' cache every listedPoll until shows says the cache reflects the
// change (what, in the log line when it does not in time), bounded by the read-your-writes timeout.
func (k *Kit) awaitCache(ctx context.Context, obj client.Object, what string, shows func(cached client.Object, err error) bool) {
	if k.Opts.Lister == nil {
		return
	}
	cached := obj.DeepCopyObject().(client.Object)
	wctx, cancel := context.WithTimeout(ctx, k.Opts.ReadYourWritesTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(wctx, listedPoll, true, func(ctx context.Context) (bool, error) {
		return shows(cached, k.Opts.Lister.Get(ctx, client.ObjectKeyFromObject(obj), cached)), nil
	})
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("The list cache did not reflect the "+what+" in time; answering anyway",
			"object", client.ObjectKeyFromObject(obj).String(), "timeout", k.Opts.ReadYourWritesTimeout)
	}
}

// resourceVersion reads obj's resourceVersion as the number the API server's storage gives it (etcd's revision),
// and false when it is not one.
func resourceVersion(obj client.Object) (uint64, bool) {
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	return rv, err == nil
}
