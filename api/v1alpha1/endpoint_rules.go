package v1alpha1

import (
	"regexp"
	"strconv"
)

// The bounds of an Endpoint's spec, which the CRD's markers state and REST checks again before it writes, so a
// client of either gets the same refusal (docs/rest-api.md "Endpoints").
const (
	MaxEndpointTargets   = 16
	MaxTargetWeight      = 1000
	MaxTargetPriority    = 9
	MaxRetryAttempts     = 5
	MinRetryStatus       = 400
	MaxRetryStatus       = 599
	MaxCooldownFailures  = 100
	MinCooldownMillis    = 1_000
	MaxCooldownMillis    = 3_600_000
	MaxTargetNameLength  = 63
	MaxTargetFieldLength = 64
)

// TargetNamePattern is the rule of a target's name: a DNS-1123 label.
var TargetNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// PricePattern is the rule of a price: a non-negative decimal with at most six places after the point.
var PricePattern = regexp.MustCompile(`^(0|[1-9][0-9]{0,8})(\.[0-9]{1,6})?$`)

// Providers are the values a target's provider may take today (docs/decisions.md "Endpoints with several
// targets"), in the order a refusal lists them.
var Providers = []Provider{ProviderOpenAI, ProviderAzureOpenAI, ProviderAnthropic, ProviderBedrock, ProviderGemini}

// TargetName is the name of the target at index i: its own, or "target-<i>".
func TargetName(i int, name string) string {
	if name != "" {
		return name
	}
	return "target-" + strconv.Itoa(i)
}

// DuplicateTargetName returns the index of the first target whose name, given or default, an earlier target
// already holds, or -1. names holds each target's own name, "" where it has none.
func DuplicateTargetName(names []string) int {
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		n = TargetName(i, n)
		if seen[n] {
			return i
		}
		seen[n] = true
	}
	return -1
}
