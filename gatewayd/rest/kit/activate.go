package kit

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// SetActive sets spec.active of d, re-reading it on a conflict, and reports whether this call changed it: of
// several concurrent calls asking for the same state, exactly one changes anything (the activation routes'
// no_op is !changed). ErrBusy when conflicts persist.
func SetActive(ctx context.Context, c client.Client, d *gatewayv1.ModelDeployment, active bool) (changed bool, err error) {
	for range 30 {
		if d.Spec.IsActive() == active {
			return false, nil
		}
		d.Spec.Active = &active
		err := c.Update(ctx, d)
		if err == nil {
			return true, nil
		}
		if !apierrors.IsConflict(err) {
			return false, err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return false, err
		}
	}
	return false, ErrBusy
}
