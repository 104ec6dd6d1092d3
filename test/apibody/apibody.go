// Package apibody builds request bodies of gatewayd's /v1 management API as plain JSON maps, the shape a
// customer's service sends, so that the REST suite and the end-to-end suites write groups the same way and a
// change to the wire format is made in one place.
package apibody

// Limit is one rate or usage limit: type REQUEST, TOKEN or COST (micro-USD), unit SECOND, MINUTE, DAY or MONTH.
func Limit(typ, unit string, threshold int) map[string]any {
	return map[string]any{"type": typ, "unit": unit, "threshold": threshold}
}

// Model is one model of a group; a nil rate or usage list is left out of the body.
func Model(slug string, rate, usage []map[string]any) map[string]any {
	m := map[string]any{"slug": slug}
	if rate != nil {
		m["rate_limits"] = rate
	}
	if usage != nil {
		m["usage_limits"] = usage
	}
	return m
}

// Group is a create-group request. parent is nil for a root (sent as JSON null) and an empty mode lets the API
// pick the limit enforcement.
func Group(ext, mode string, parent any, models ...map[string]any) map[string]any {
	h := map[string]any{"parent_group_id": parent}
	if mode != "" {
		h["limit_enforcement"] = mode
	}
	return map[string]any{
		"metadata":  map[string]any{"name": "Name " + ext, "external_entity_id": ext},
		"models":    models,
		"hierarchy": h,
	}
}
