package rest_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

var _ = Describe("Management rate limits", func() {
	It("refuses the 101st call of a key on a route within a second with the exact body, and only that", func() {
		clk := resttest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 250_000_000, time.UTC))
		srv := resttest.Serve(rest.Options{Clock: clk.Now})
		ns, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		other := resttest.SeedKey(ns, gatewayv1.KeyTypeManageAll, "", "")
		for i := range 100 {
			r := resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/grp-missing0000000", nil)
			Expect(r.Code).To(Equal(http.StatusNotFound), "call %d", i+1)
		}
		r := resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/grp-missing0000000", nil)
		Expect(r.Code).To(Equal(http.StatusTooManyRequests))
		Expect(r.Header.Get("Retry-After")).To(Equal("1"))
		var body map[string]any
		Expect(json.Unmarshal(r.Raw, &body)).To(Succeed())
		Expect(body).To(Equal(map[string]any{"error": "Rate limit exceeded. Please try again later.", "retry_after": 1.0}))
		resttest.Conform("RateLimited", r.Raw)

		By("counting per route pattern, not per path")
		Expect(resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/grp-other000000000", nil).Code).To(Equal(http.StatusTooManyRequests))
		By("leaving other routes and other keys alone")
		Expect(resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/endpoints", nil).Code).To(Equal(http.StatusOK))
		Expect(resttest.Call(srv, other, http.MethodGet, "/v1/gateway/groups/grp-missing0000000", nil).Code).To(Equal(http.StatusNotFound))
		By("freeing the window when the second is over")
		clk.Add(750 * time.Millisecond)
		Expect(resttest.Call(srv, admin, http.MethodGet, "/v1/gateway/groups/grp-missing0000000", nil).Code).To(Equal(http.StatusNotFound))
	})

	It("walks the table row by row: each row is its own bucket per key, and its 429 is exact", func() {
		// The table of docs/rest-api.md "Management rate limits", as calls: the three deployment selectors of
		// activate, deactivate and retry are rows of their own; every other endpoint is its own row at 100 per
		// second, by method and route (a few of them here, beside the rows they could be confused with).
		type row struct {
			method, path string
			n            int
			window       time.Duration
		}
		const deployments = "/v1/models/rl-model/deployments/"
		table := []row{
			{"POST", deployments + "development/activate", 20, time.Minute},
			{"POST", deployments + "production/activate", 20, time.Minute},
			{"POST", deployments + "dep-1/activate", 20, time.Minute},
			{"POST", deployments + "development/deactivate", 20, time.Minute},
			{"POST", deployments + "production/deactivate", 20, time.Minute},
			{"POST", deployments + "dep-1/deactivate", 20, time.Minute},
			{"POST", deployments + "development/retry", 10, time.Minute},
			{"POST", deployments + "production/retry", 10, time.Minute},
			{"POST", deployments + "dep-1/retry", 10, time.Minute},
			{"POST", deployments + "dep-1/logs", 30, time.Second},
			{"GET", deployments + "production", 100, time.Second},
			{"DELETE", deployments + "production", 100, time.Second},
			{"POST", "/v1/models/rl-model/environments/production/activate", 100, time.Second},
		}
		clk := resttest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 250_000_000, time.UTC))
		srv := resttest.Serve(rest.Options{Clock: clk.Now})
		ns, key := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		other := resttest.SeedKey(ns, gatewayv1.KeyTypeManageAll, "", "")
		for _, rw := range table {
			By(rw.method + " " + rw.path)
			// A new minute: every window of the previous row is over.
			clk.Add(time.Minute)
			for i := range rw.n {
				r := resttest.Call(srv, key, rw.method, rw.path, nil)
				Expect(r.Code).NotTo(Equal(http.StatusTooManyRequests), "%s %s: call %d of %d refused", rw.method, rw.path, i+1, rw.n)
			}
			r := resttest.Call(srv, key, rw.method, rw.path, nil)
			wait := clk.Now().Truncate(rw.window).Add(rw.window).Sub(clk.Now())
			secs := int((wait + time.Second - 1) / time.Second)
			Expect(r.Code).To(Equal(http.StatusTooManyRequests), "%s %s: call %d: %s", rw.method, rw.path, rw.n+1, r)
			Expect(r.Header.Get("Retry-After")).To(Equal(strconv.Itoa(secs)))
			Expect(r.Body).To(Equal(map[string]any{"error": "Rate limit exceeded. Please try again later.", "retry_after": float64(secs)}))
			resttest.Conform("RateLimited", r.Raw)

			for _, neighbour := range table {
				if neighbour != rw {
					r := resttest.Call(srv, key, neighbour.method, neighbour.path, nil)
					Expect(r.Code).NotTo(Equal(http.StatusTooManyRequests), "%s %s shares the bucket of %s %s", neighbour.method, neighbour.path, rw.method, rw.path)
				}
			}
			r = resttest.Call(srv, other, rw.method, rw.path, nil)
			Expect(r.Code).NotTo(Equal(http.StatusTooManyRequests), "another key shares the bucket of %s %s", rw.method, rw.path)
		}
	})
})

var _ = Describe("Bad input", func() {
	It("answers a clear 4xx for malformed JSON, unknown fields, wrong types, huge bodies and invalid ids", func() {
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		post := func(body any) resttest.Response {
			return resttest.Call(resttest.Server, admin, http.MethodPost, "/v1/gateway/groups", body)
		}

		resttest.ExpectError(post(`{"metadata":`), http.StatusBadRequest, "malformed_json")
		resttest.ExpectError(post(`not json`), http.StatusBadRequest, "malformed_json")
		resttest.ExpectError(post(``), http.StatusBadRequest, "malformed_json")
		resttest.ExpectError(post(`{"models":[]} {"again":1}`), http.StatusBadRequest, "malformed_json")

		r := post(`{"metadata":{"external_entity_id":"x"},"models":[{"slug":"a"}],"colour":"red"}`)
		resttest.ExpectError(r, http.StatusBadRequest, "unknown_field")
		Expect(r.Body["error"]).To(ContainSubstring("colour"))

		r = post(`{"metadata":{"external_entity_id":"x"},"models":"all"}`)
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_type")
		Expect(r.Body["error"]).To(ContainSubstring("models"))
		r = post(`{"metadata":{"external_entity_id":"x"},"models":[{"slug":"a","rate_limits":[{"type":"REQUEST","unit":"SECOND","threshold":"ten"}]}]}`)
		resttest.ExpectError(r, http.StatusBadRequest, "invalid_type")
		Expect(r.Body["error"]).To(ContainSubstring("threshold"))

		huge := `{"metadata":{"name":"` + strings.Repeat("x", 2<<20) + `","external_entity_id":"x"},"models":[{"slug":"a"}]}`
		r = post(huge)
		resttest.ExpectError(r, http.StatusRequestEntityTooLarge, "payload_too_large")
		Expect(r.Body["detail"]).To(ConsistOf(HaveKeyWithValue("field", "body")), "the body is named as every refused field is")

		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodPatch, "/v1/gateway/groups/UPPER_case", map[string]any{"models": []any{}}), http.StatusBadRequest, "invalid_request")
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodDelete, "/v1/gateway/endpoints/-bad-", nil), http.StatusBadRequest, "invalid_request")
		resttest.ExpectError(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/gateway/groups/"+strings.Repeat("a", 300), nil), http.StatusBadRequest, "invalid_request")
	})

	It("refuses a member given twice on the management writes, and a parameter or header a route reads once given twice, naming it", func() {
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		refused := func(r resttest.Response, field string) {
			GinkgoHelper()
			resttest.ExpectError(r, http.StatusBadRequest, "invalid_request")
			Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", field)), "%s", r)
		}
		for _, tc := range []struct{ path, body, field string }{
			{"/v1/gateway/groups", `{"metadata":{"external_entity_id":"x"},"models":[{"slug":"a","rate_limits":[{"type":"REQUEST","type":"TOKEN","unit":"SECOND","threshold":1}]}]}`, "models[0].rate_limits[0].type"},
			{"/v1/gateway/endpoints", `{"slug":"a","slug":"b","targets":[]}`, "slug"},
			{"/v1/models", `{"id":"m1","team_id":"","team_id":"red"}`, "team_id"},
		} {
			By(tc.path + " " + tc.body)
			refused(resttest.Call(resttest.Server, admin, http.MethodPost, tc.path, tc.body), tc.field)
		}

		By("the sandbox routes' team, by query and by header")
		refused(resttest.Call(resttest.Server, admin, http.MethodGet, "/v1/sandboxes/images/img?team_id=red&team_id=blue", nil), "team_id")
		req, err := http.NewRequestWithContext(resttest.Ctx, http.MethodGet, resttest.Server.URL+"/v1/sandboxes/images/img", nil)
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+admin)
		req.Header.Add("X-Team-Id", "red")
		req.Header.Add("X-Team-Id", "blue")
		resp, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		var body map[string]any
		Expect(json.NewDecoder(resp.Body).Decode(&body)).To(Succeed())
		Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "%v", body)
		Expect(body["detail"]).To(ContainElement(HaveKeyWithValue("field", "X-Team-Id")), "%v", body)
	})
})
