package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

func TestFromKey(t *testing.T) {
	r := &KeyReconciler[*gatewayv1.APIKey]{
		kind:   "APIKey",
		status: func(k *gatewayv1.APIKey) *gatewayv1.KeyStatus { return &k.Status },
	}
	good := "byok-0123456789abcdefghijKLMNOPQRSTUV"
	sum := sha256.Sum256([]byte(good))
	for _, tc := range []struct {
		name   string
		raw    []byte
		reason string
	}{
		{"valid", []byte(good), ""},
		{"trailing newline of a file is ignored", []byte(good + "\n"), ""},
		{"missing entry", nil, gatewayv1.ReasonSecretInvalid},
		{"too short", []byte("byok-0123456789abcdefghij"), gatewayv1.ReasonSecretInvalid},
		{"too long", make([]byte, 129), gatewayv1.ReasonSecretInvalid},
		{"low entropy", []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"), gatewayv1.ReasonSecretInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &gatewayv1.APIKey{Status: gatewayv1.KeyStatus{Prefix: "stale-prefix-000", Hash: "stale"}}
			c := r.fromKey(k, "s", "api_key", tc.raw)
			if tc.reason == "" {
				if c.Failed || k.Status.Prefix != good[:16] || k.Status.Hash != hex.EncodeToString(sum[:]) {
					t.Errorf("fromKey = %+v, status %+v; want prefix %s and the hash of the trimmed key", c, k.Status, good[:16])
				}
				return
			}
			if !c.Failed || c.Reason != tc.reason || k.Status.Prefix != "" || k.Status.Hash != "" {
				t.Errorf("fromKey = %+v, status %+v; want %s and cleared credentials", c, k.Status, tc.reason)
			}
		})
	}
}
