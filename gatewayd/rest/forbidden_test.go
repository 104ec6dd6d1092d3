package rest_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
	"github.com/modelgate/modelgate/test/chart/helmtest"
)

var _ = Describe("A refusal by the API server's RBAC", func() {
	It("answers 503 saying the gateway lacks the permission, and logs the verb, the resource and the identity at ERROR", func() {
		// A gatewayd whose ServiceAccount nothing is bound to: every call it makes is refused by RBAC, as a verb
		// missing from the chart's Role is on a real install (docs/rbac.md).
		const sa = "unbound-gatewayd"
		unbound, err := client.New(helmtest.Impersonate(resttest.Env.Config, helmtest.ReleaseNamespace, sa), client.Options{Scheme: resttest.Env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		var (
			mu     sync.Mutex
			errors []map[string]any
		)
		logger := funcr.NewJSON(func(obj string) {
			var line map[string]any
			Expect(json.Unmarshal([]byte(obj), &line)).To(Succeed())
			if _, isError := line["error"]; isError {
				mu.Lock()
				errors = append(errors, line)
				mu.Unlock()
			}
		}, funcr.Options{})
		mux := ingress.NewRoutes()
		rest.New(rest.Options{Client: unbound, Directory: resttest.Dir, ReadYourWritesTimeout: 30 * time.Second, Logger: logger}).Register(mux)
		srv := httptest.NewServer(mux)
		DeferCleanup(srv.Close)

		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		r := resttest.Call(srv, admin, http.MethodPost, "/v1/models", map[string]any{"id": "m1", "display_name": "M"})
		Expect(r.Code).To(Equal(http.StatusServiceUnavailable), "%s", r)
		resttest.Conform("Error", r.Raw)
		Expect(r.Body).To(HaveKeyWithValue("error_code", "control_plane_unavailable"))
		Expect(r.Body).To(HaveKeyWithValue("error", "The gateway lacks the permission to create models on the Kubernetes API; its operator must grant it."))

		mu.Lock()
		defer mu.Unlock()
		Expect(errors).To(ContainElement(And(
			HaveKeyWithValue("msg", ContainSubstring("lacks a permission")),
			HaveKeyWithValue("verb", "create"),
			HaveKeyWithValue("resource", "models"),
			HaveKeyWithValue("apiGroup", gatewayv1.GroupVersion.Group),
			HaveKeyWithValue("serviceAccount", "system:serviceaccount:"+helmtest.ReleaseNamespace+":"+sa),
			HaveKeyWithValue("op", "create model"),
		)), "error lines %v", errors)
		Expect(resttest.Client.Get(resttest.Ctx, client.ObjectKey{Namespace: ns, Name: "m1"}, &gatewayv1.Model{})).NotTo(Succeed())
	})
})
