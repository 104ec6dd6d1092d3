package loadbench

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var schemaGroups = schema.GroupResource{Group: "gateway.modelgate.io", Resource: "groups"}

// TestWebhookTimedOut sends again only a write the API server refused because its admission webhook call failed:
// a refusal by the webhook itself, or any other error, is the run's failure.
func TestWebhookTimedOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"webhook call timed out", apierrors.NewInternalError(errors.New(`failed calling webhook "vgroup-v1alpha1.gateway.modelgate.io": failed to call webhook: Post "https://127.0.0.1:1/validate?timeout=10s": context deadline exceeded`)), true},
		{"other internal error", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), false},
		{"refused by the webhook", apierrors.NewForbidden(schemaGroups, "g", errors.New(`admission webhook "vgroup-v1alpha1.gateway.modelgate.io" denied the request`)), false},
		{"already exists", apierrors.NewAlreadyExists(schemaGroups, "g"), false},
		{"not an API error", errors.New("failed calling webhook"), false},
	} {
		if got := webhookTimedOut(tc.err); got != tc.want {
			t.Errorf("%s: webhookTimedOut = %v, want %v", tc.name, got, tc.want)
		}
	}
}
