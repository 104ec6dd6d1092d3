package groups_test

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
	"github.com/modelgate/modelgate/test/apibody"
)

// usageByKind answers each (type, unit) counter from a table, so a test sees which counter the route read.
type usageByKind map[string]int64

func (u usageByKind) Usage(_ context.Context, _, _, _, typ, unit string, _ time.Time) (int64, error) {
	return u[typ+"/"+unit], nil
}

// usageLimits is the usage_limits of a group's first effective model.
func usageLimits(g map[string]any) []any {
	return g["effective_models"].([]any)[0].(map[string]any)["usage_limits"].([]any)
}

var _ = Describe("COST and MONTH limits", func() {
	const dollars5 = 5_000_000 // $5 in micro-USD
	var admin string
	create := func(ext, mode string, parent any, models ...map[string]any) map[string]any {
		GinkgoHelper()
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group(ext, mode, parent, models...))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		resttest.Conform("Group", r.Raw)
		return r.Body
	}
	BeforeEach(func() {
		_, admin = resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
	})

	It("takes COST and MONTH usage limits, and an INDEPENDENT child inherits them with their source group", func() {
		parent := create("money-parent", "INDEPENDENT", nil, apibody.Model("demo/echo", nil, []map[string]any{
			apibody.Limit("COST", "MONTH", dollars5), apibody.Limit("COST", "DAY", 500_000),
			apibody.Limit("TOKEN", "MONTH", 1_000_000), apibody.Limit("REQUEST", "MONTH", 3000),
		}))
		pid := parent["id"]
		Expect(usageLimits(parent)).To(ConsistOf(
			map[string]any{"type": "COST", "unit": "MONTH", "threshold": float64(dollars5), "source_group": pid},
			map[string]any{"type": "COST", "unit": "DAY", "threshold": 500_000.0, "source_group": pid},
			map[string]any{"type": "TOKEN", "unit": "MONTH", "threshold": 1_000_000.0, "source_group": pid},
			map[string]any{"type": "REQUEST", "unit": "MONTH", "threshold": 3000.0, "source_group": pid},
		))

		By("a child that declares nothing inherits every one")
		child := create("money-child", "", pid, apibody.Model("demo/echo", nil, nil))
		Expect(usageLimits(child)).To(HaveLen(4))
		Expect(usageLimits(child)).To(ContainElement(map[string]any{"type": "COST", "unit": "MONTH", "threshold": float64(dollars5), "source_group": pid}))

		By("a child may declare its own COST MONTH, above the parent's in INDEPENDENT mode, and keeps the others")
		own := create("money-own", "", pid, apibody.Model("demo/echo", nil, []map[string]any{apibody.Limit("COST", "MONTH", 2*dollars5)}))
		Expect(usageLimits(own)).To(ContainElement(map[string]any{"type": "COST", "unit": "MONTH", "threshold": float64(2 * dollars5), "source_group": own["id"]}))
		Expect(usageLimits(own)).To(ContainElement(map[string]any{"type": "COST", "unit": "DAY", "threshold": 500_000.0, "source_group": pid}))
		Expect(usageLimits(own)).To(HaveLen(4))
	})

	It("refuses COST as a rate limit, a rolling unit for a usage limit, and two limits of one type and unit", func() {
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("money-rate", "", nil,
			apibody.Model("demo/echo", []map[string]any{apibody.Limit("COST", "MINUTE", 5)}, nil)))
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Raw).To(ContainSubstring(`"field":"models[0].rate_limits[0].type"`))
		Expect(r.Body["error"]).To(ContainSubstring("COST is a usage limit only, unit DAY or MONTH"))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("money-rate-month", "", nil,
			apibody.Model("demo/echo", []map[string]any{apibody.Limit("REQUEST", "MONTH", 5)}, nil)))
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["error"]).To(ContainSubstring("rate limits take unit SECOND or MINUTE"))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("money-minute", "", nil,
			apibody.Model("demo/echo", nil, []map[string]any{apibody.Limit("COST", "MINUTE", 5)})))
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["error"]).To(ContainSubstring("usage limits take unit DAY or MONTH"))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("money-twice", "", nil,
			apibody.Model("demo/echo", nil, []map[string]any{apibody.Limit("COST", "MONTH", 5), apibody.Limit("COST", "MONTH", 6)})))
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Body["error"]).To(ContainSubstring("at most one usage limit per type and unit"))

		r = resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("money-type", "", nil,
			apibody.Model("demo/echo", nil, []map[string]any{apibody.Limit("DOLLAR", "MONTH", 5)})))
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
		Expect(r.Raw).To(ContainSubstring(`"field":"models[0].usage_limits[0].type"`))
	})

	It("compares a CASCADING child's COST only with its ancestors' COST of the same unit", func() {
		root := create("money-cas-root", "CASCADING", nil, apibody.Model("demo/echo", nil, []map[string]any{
			apibody.Limit("COST", "MONTH", dollars5), apibody.Limit("TOKEN", "DAY", 1000),
		}))
		rid := root["id"]
		r := resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("money-cas-greedy", "", rid,
			apibody.Model("demo/echo", nil, []map[string]any{apibody.Limit("COST", "MONTH", dollars5+1)})))
		resttest.ExpectError(r, http.StatusBadRequest, "child_exceeds_parent_limit")
		Expect(r.Body["error"]).To(Equal(cascadeMsg))
		Expect(r.Raw).To(ContainSubstring("models[0].usage_limits[0].threshold"))

		By("a COST DAY or a TOKEN MONTH above the root's COST MONTH is no conflict: other units, other types")
		leaf := create("money-cas-leaf", "", rid, apibody.Model("demo/echo", nil, []map[string]any{
			apibody.Limit("COST", "DAY", 2*dollars5), apibody.Limit("TOKEN", "MONTH", 2*dollars5), apibody.Limit("COST", "MONTH", dollars5/2),
		}))
		Expect(usageLimits(leaf)).To(ContainElements(
			map[string]any{"type": "COST", "unit": "MONTH", "threshold": float64(dollars5 / 2), "source_group": leaf["id"]},
			map[string]any{"type": "COST", "unit": "MONTH", "threshold": float64(dollars5), "source_group": rid},
		))

		By("the root may not be lowered below the leaf's COST MONTH")
		r = resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/groups/"+rid.(string), map[string]any{
			"models": []any{apibody.Model("demo/echo", nil, []map[string]any{apibody.Limit("COST", "MONTH", dollars5/4)})},
		})
		resttest.ExpectError(r, http.StatusBadRequest, "child_exceeds_parent_limit")
		Expect(r.Body["error"]).To(Equal(cascadeMsg))
	})

	It("reports MONTH usage with reset_at at the first instant of the next month", func() {
		now := time.Date(2026, 12, 14, 15, 9, 26, 0, time.UTC)
		counters := usageByKind{"COST/MONTH": 1_250_000, "COST/DAY": 40_000, "TOKEN/MONTH": 777}
		srv := resttest.Serve(rest.Options{Usage: counters, Clock: func() time.Time { return now }})
		r := resttest.Call(srv, admin, http.MethodPost, "/v1/gateway/groups", apibody.Group("money-usage", "", nil,
			apibody.Model("demo/echo", nil, []map[string]any{apibody.Limit("COST", "MONTH", dollars5), apibody.Limit("COST", "DAY", 500_000), apibody.Limit("TOKEN", "MONTH", 9000)})))
		Expect(r.Code).To(Equal(http.StatusCreated), "%s", r)
		id := r.Body["id"].(string)
		r = resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/"+id+"/usage", nil)
		Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
		resttest.Conform("GroupUsage", r.Raw)
		var got struct {
			Usage map[string][]map[string]any `json:"usage"`
		}
		Expect(json.Unmarshal(r.Raw, &got)).To(Succeed())
		Expect(got.Usage["demo/echo"]).To(ConsistOf(
			map[string]any{"type": "COST", "unit": "MONTH", "threshold": float64(dollars5), "current_usage": 1_250_000.0, "reset_at": "2027-01-01T00:00:00Z", "source_group": id},
			map[string]any{"type": "COST", "unit": "DAY", "threshold": 500_000.0, "current_usage": 40_000.0, "reset_at": "2026-12-15T00:00:00Z", "source_group": id},
			map[string]any{"type": "TOKEN", "unit": "MONTH", "threshold": 9000.0, "current_usage": 777.0, "reset_at": "2027-01-01T00:00:00Z", "source_group": id},
		))
	})
})
