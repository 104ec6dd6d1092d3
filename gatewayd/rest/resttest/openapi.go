package resttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Conform checks real responses against the schemas of the OpenAPI document. The validator covers the subset of
// JSON Schema the document uses: $ref, type, nullable, required, properties, additionalProperties, items, enum,
// minimum.

var openAPI map[string]any

// OpenAPI is the OpenAPI document the API serves (GET /v1/spec on Server, the file embedded in the binary),
// decoded once.
func OpenAPI() map[string]any {
	if openAPI == nil {
		r := Call(Server, "", http.MethodGet, "/v1/spec", nil)
		Expect(r.Code).To(Equal(http.StatusOK))
		Expect(json.Unmarshal(r.Raw, &openAPI)).To(Succeed())
	}
	return openAPI
}

// Conform asserts that raw is valid against the named component schema of the OpenAPI document.
func Conform(schema string, raw []byte) {
	ginkgo.GinkgoHelper()
	var v any
	Expect(json.Unmarshal(raw, &v)).To(Succeed())
	errs := validate(map[string]any{"$ref": "#/components/schemas/" + schema}, v, "$")
	Expect(errs).To(BeEmpty(), "body %s does not conform to %s", raw, schema)
}

func validate(schema map[string]any, v any, path string) []string {
	doc := OpenAPI()
	if v == nil && schema["nullable"] == true {
		return nil
	}
	if ref, ok := schema["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		s, ok := doc["components"].(map[string]any)["schemas"].(map[string]any)[name].(map[string]any)
		if !ok {
			return []string{path + ": unknown schema " + ref}
		}
		return validate(s, v, path)
	}
	if v == nil {
		if schema["nullable"] == true || schema["type"] == nil {
			return nil
		}
		return []string{path + ": null is not allowed"}
	}
	var errs []string
	if enum, ok := schema["enum"].([]any); ok && !slices.Contains(enum, v) {
		errs = append(errs, fmt.Sprintf("%s: %v is not one of %v", path, v, enum))
	}
	switch schema["type"] {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return append(errs, path+": want an object")
		}
		props, _ := schema["properties"].(map[string]any)
		for _, r := range asSlice(schema["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				errs = append(errs, path+": missing required "+r.(string))
			}
		}
		for k, val := range obj {
			if ps, ok := props[k].(map[string]any); ok {
				errs = append(errs, validate(ps, val, path+"."+k)...)
			} else if ap, ok := schema["additionalProperties"].(map[string]any); ok {
				errs = append(errs, validate(ap, val, path+"."+k)...)
			} else if schema["additionalProperties"] == false {
				errs = append(errs, path+": unexpected property "+k)
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return append(errs, path+": want an array")
		}
		items, _ := schema["items"].(map[string]any)
		for i, it := range arr {
			errs = append(errs, validate(items, it, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			return append(errs, path+": want a string")
		}
		if schema["format"] == "date-time" && !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`).MatchString(s) {
			errs = append(errs, path+": not an RFC 3339 UTC timestamp: "+s)
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return append(errs, path+": want an integer")
		}
		if m, ok := schema["minimum"].(float64); ok && f < m {
			errs = append(errs, fmt.Sprintf("%s: %v below minimum %v", path, f, m))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			errs = append(errs, path+": want a boolean")
		}
	}
	return errs
}

func asSlice(v any) []any { s, _ := v.([]any); return s }
