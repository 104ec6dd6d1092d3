package v1alpha1

import "testing"

// TestUpstreamHostAllowed: the hosts an upstream credential Secret lists, by name (any port), name and port, or
// wildcard below a domain; a Secret that lists none allows every host.
func TestUpstreamHostAllowed(t *testing.T) {
	list := map[string]string{AnnotationUpstreamHosts: "api.example.com, *.azure.example.net ,10.0.0.7:8443,[::1]:9000"}
	for _, tc := range []struct {
		annotations map[string]string
		url         string
		allowed     bool
	}{
		{list, "https://api.example.com/v1", true},
		{list, "https://API.Example.com:444/v1", true},
		{list, "https://eu.azure.example.net/v1", true},
		{list, "https://a.b.azure.example.net/v1", true},
		{list, "https://azure.example.net/v1", false},
		{list, "https://api.example.com.attacker.org/v1", false},
		{list, "https://attacker.org/api.example.com", false},
		{list, "https://api.example.com@attacker.org/v1", false},
		{list, "http://10.0.0.7:8443/v1", true},
		{list, "http://10.0.0.7/v1", false},
		{list, "http://10.0.0.7:9000/v1", false},
		{list, "http://[::1]:9000/v1", true},
		{list, "not a url", false},
		{map[string]string{AnnotationUpstreamHosts: ""}, "https://api.example.com/v1", false},
		{nil, "https://anything.example.org/v1", true},
	} {
		allowed, listed := UpstreamHostAllowed(tc.annotations, tc.url)
		if allowed != tc.allowed || listed != (tc.annotations != nil) {
			t.Errorf("%v %s: allowed %v listed %v, want allowed %v", tc.annotations, tc.url, allowed, listed, tc.allowed)
		}
	}
}
