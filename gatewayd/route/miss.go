package route

import (
	"context"
	"net/http"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Resolve runs resolve on v, the view in force, and, when it answers a miss (Missed) and catchUp says a newer
// view is in force once this replica serves every snapshot of namespace ns published before the call, once more
// on that view: a model, deployment, chain or Endpoint written through another replica is found here as soon as
// that write is answered (docs/limits.md "Read-your-writes on every replica"). A hit, or a nil catchUp, costs
// nothing more than resolve(v).
func Resolve(ctx context.Context, v *view.View, current func() *view.View, ns string, catchUp auth.CatchUp,
	resolve func(*view.View) *httperr.Error) *httperr.Error {
	e := resolve(v)
	if e == nil || catchUp == nil || !Missed(e) || !catchUp(ctx, v, ns) {
		return e
	}
	return resolve(current())
}

// Missed reports whether e is the answer of something the view does not serve: a 404, or the 503 of a slug no
// Endpoint routes.
func Missed(e *httperr.Error) bool {
	return e.Status == http.StatusNotFound || e.Status == http.StatusServiceUnavailable && e.Code == httperr.CodeModelNotReady
}
