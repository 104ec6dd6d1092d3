package rest_test

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

// The OpenAPI document is checked two ways: every route the API registers is in it, and real responses of the
// suites conform to its schemas (resttest.Conform, called by the specs on the bodies they receive).

var _ = Describe("GET /v1/spec", func() {
	It("serves an OpenAPI 3 document naming every registered route, without authentication", func() {
		r := resttest.Call(resttest.Server, "", http.MethodGet, "/v1/spec", nil)
		Expect(r.Code).To(Equal(http.StatusOK))
		Expect(r.Body["openapi"]).To(HavePrefix("3."))
		paths := r.Body["paths"].(map[string]any)
		// Every route is registered in api.go or in a resource package's Register.
		files, err := filepath.Glob("*/*.go")
		Expect(err).NotTo(HaveOccurred())
		var routes [][]string
		for _, f := range append(files, "api.go") {
			src, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			routes = append(routes, regexp.MustCompile(`(?:k\.Handle\(mux, |mux\.HandleFunc\()"([A-Z]+) (/v1[^"]*)"`).FindAllStringSubmatch(string(src), -1)...)
		}
		Expect(len(routes)).To(BeNumerically(">=", 20))
		// Routes whose patterns are composed at run time (gatewayd/rest/envroutes) are read from the API itself.
		api := rest.New(rest.Options{})
		api.Register(http.NewServeMux())
		Expect(api.Patterns()).To(ContainElements("GET /v1/models/{model_id}/environments", "POST /v1/chains/{chain_id}/environments/{env_name}/promote"))
		for _, p := range api.Patterns() {
			method, path, _ := strings.Cut(p, " ")
			routes = append(routes, []string{p, method, path})
		}
		for _, m := range routes {
			ops, ok := paths[m[2]].(map[string]any)
			Expect(ok).To(BeTrue(), "path %s missing from the spec", m[2])
			Expect(ops).To(HaveKey(strings.ToLower(m[1])), "%s %s missing from the spec", m[1], m[2])
		}
	})

	// api/v1alpha1 states the key types and the limit types and units once; the document, and the dashboard's types
	// generated from it, list the same values, so a new key type or limit kind cannot reach one and not the other.
	It("lists the key types and the limit types and units that api/v1alpha1 states", func() {
		schemas := resttest.OpenAPI()["components"].(map[string]any)["schemas"].(map[string]any)
		enum := func(path ...string) []string {
			var node any = schemas
			for _, p := range path {
				node = node.(map[string]any)[p]
			}
			var out []string
			for _, v := range node.(map[string]any)["enum"].([]any) {
				out = append(out, v.(string))
			}
			return out
		}
		strs := func(vs ...string) []string { return vs }
		var keyTypes, limitTypes, units []string
		for _, t := range gatewayv1.KeyTypes {
			keyTypes = append(keyTypes, string(t))
		}
		for _, t := range gatewayv1.LimitTypes {
			limitTypes = append(limitTypes, string(t))
		}
		for _, u := range gatewayv1.LimitUnits {
			units = append(units, string(u))
		}
		Expect(enum("WorkspaceKeyType")).To(Equal(keyTypes))
		for _, schema := range strs("Limit", "EffectiveLimit") {
			Expect(enum(schema, "properties", "type")).To(ConsistOf(limitTypes), schema+".type")
			Expect(enum(schema, "properties", "unit")).To(ConsistOf(units), schema+".unit")
		}
		Expect(enum("ThrottleCount", "properties", "limit_type")).To(ConsistOf(append(limitTypes, "")), "ThrottleCount.limit_type")
		Expect(enum("ThrottleCount", "properties", "limit_unit")).To(ConsistOf(append(units, "")), "ThrottleCount.limit_unit")
	})
})

var _ = Describe("Error answers of every route", func() {
	It("are the Error envelope of the OpenAPI document, for a missing key, an unknown key, a missing object and a malformed body", func() {
		_, admin := resttest.Workspace(gatewayv1.KeyTypeManageAll, "")
		_, personal := resttest.Workspace(gatewayv1.KeyTypePersonal, gatewayv1.OrgRoleAdmin)
		param := regexp.MustCompile(`\{[a-z_]+\}`)
		walked := 0
		for path, opsAny := range resttest.OpenAPI()["paths"].(map[string]any) {
			ops := opsAny.(map[string]any)
			if path == "/v1/spec" {
				continue
			}
			for method, op := range ops {
				// An operation that declares no security (a signed upload URL) is not a workspace-key route.
				if sec, ok := op.(map[string]any)["security"].([]any); ok && len(sec) == 0 {
					continue
				}
				// An operation gatewayd mounts beside this API (x-mounted-with) is not served by this suite's server.
				if _, ok := op.(map[string]any)["x-mounted-with"]; ok {
					continue
				}
				method = strings.ToUpper(method)
				// Ids no object has: valid names, and a valid 16-character prefix.
				url := param.ReplaceAllStringFunc(path, func(p string) string {
					if strings.Contains(p, "prefix") {
						return "mgk_NoSuchKey000"
					}
					return "no-such-object"
				})
				key := admin
				if strings.HasPrefix(path, "/v1/api_keys") {
					key = personal
				}
				expectEnvelope := func(r resttest.Response, want int, what string) {
					GinkgoHelper()
					Expect(r.Code).To(Equal(want), "%s %s, %s: %s", method, url, what, r)
					resttest.Conform("Error", r.Raw)
					Expect(r.Body).To(HaveKey("detail"), "%s %s, %s: detail is always present", method, url, what)
					if d, ok := r.Body["detail"].([]any); ok {
						for _, f := range d {
							Expect(f.(map[string]any)["field"]).NotTo(BeElementOf("", "<nil>"), "%s %s: a field entry names no field", method, url)
						}
					}
				}
				expectEnvelope(resttest.Call(resttest.Server, "", method, url, nil), http.StatusUnauthorized, "no key")
				expectEnvelope(resttest.Call(resttest.Server, "mgw_NoSuchKey000.abcdefghijklmnopqrstuvwxyz012345", method, url, nil), http.StatusUnauthorized, "unknown key")
				if strings.Contains(path, "{") {
					r := resttest.Call(resttest.Server, key, method, url, nil)
					Expect(r.Code).To(BeNumerically(">=", 400), "%s %s of a missing object: %s", method, url, r)
					expectEnvelope(r, r.Code, "missing object")
				}
				if method == http.MethodPost || method == http.MethodPatch {
					r := resttest.Call(resttest.Server, key, method, url, []byte(`{"oops"`))
					Expect(r.Code).To(BeNumerically(">=", 400), "%s %s with malformed JSON: %s", method, url, r)
					expectEnvelope(r, r.Code, "malformed body")
				}
				walked++
			}
		}
		Expect(walked).To(BeNumerically(">=", 19), "every documented route was walked")
	})
})
