package groups_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
	"github.com/modelgate/modelgate/test/apibody"
)

// readBeforeDeletion is a client whose Get of a Group returns it as it was before its deletion began: the read
// of a create that ran just before the parent's delete.
type readBeforeDeletion struct{ client.Client }

func (c readBeforeDeletion) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := c.Client.Get(ctx, key, obj, opts...)
	if g, ok := obj.(*gatewayv1.Group); ok && err == nil {
		g.DeletionTimestamp = nil
	}
	return err
}

// docs/rest-api.md: a parent being deleted is 404 on create, whether REST saw the deletion or only admission did
// (issue 29, item 6).
var _ = Describe("A child of a parent being deleted", func() {
	It("is 404 not_found, also when the parent's deletion began after REST read it", func() {
		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("doomed-parent", "", nil, apibody.Model("a", nil, nil)))
		Expect(r.Code).To(Equal(http.StatusCreated), string(r.Raw))
		parentID := r.Body["id"].(string)
		// A finalizer of the test's own keeps the parent in deletion for as long as the spec needs. The group's
		// controller writes it too, so each write reads it again on a conflict.
		const hold = "test.modelgate.io/hold"
		key := client.ObjectKey{Namespace: ns, Name: parentID}
		var parent gatewayv1.Group
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := resttest.Client.Get(resttest.Ctx, key, &parent); err != nil {
				return err
			}
			parent.Finalizers = append(parent.Finalizers, hold)
			return resttest.Client.Update(resttest.Ctx, &parent)
		})).To(Succeed())
		DeferCleanup(func() {
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var g gatewayv1.Group
				if err := resttest.Client.Get(resttest.Ctx, key, &g); err != nil {
					return client.IgnoreNotFound(err)
				}
				g.Finalizers = slices.DeleteFunc(g.Finalizers, func(f string) bool { return f == hold })
				return resttest.Client.Update(resttest.Ctx, &g)
			})
		})
		Expect(resttest.Client.Delete(resttest.Ctx, &parent)).To(Succeed())

		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("child-seen", "", parentID, apibody.Model("a", nil, nil))),
			http.StatusNotFound, "not_found")

		mux := ingress.NewRoutes()
		rest.New(rest.Options{Client: readBeforeDeletion{resttest.Gatewayd}, Directory: resttest.Dir, ReadYourWritesTimeout: 30 * time.Second,
			Logger: logf.Log.WithName("rest")}).Register(mux)
		stale := httptest.NewServer(mux)
		DeferCleanup(stale.Close)
		r = resttest.Call(stale, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("child-admitted", "", parentID, apibody.Model("a", nil, nil)))
		resttest.ExpectError(r, http.StatusNotFound, "not_found")
		Expect(r.Body["error"]).To(ContainSubstring(parentID))
	})
})
