package ids

import (
	"regexp"
	"testing"
)

// TestFormats pins every kind's wire format as clients and stored data know it: a changed row fails here.
func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Kind
		re   string
	}{
		{"group", Group, `^grp-[0-9a-z]{16}$`},
		{"federated key object", FederatedKeyName, `^key-[0-9a-z]{16}$`},
		{"endpoint", Endpoint, `^ep-[0-9a-z]{16}$`},
		{"workspace key object", WorkspaceKeyName, `^wk-[0-9a-z]{16}$`},
		{"sandbox image build", SandboxImageBuild, `^sib-[0-9a-z]{16}$`},
		{"request", Request, `^req_[0-9a-f]{24}$`},
		{"billing event", BillingEvent, `^evt_[0-9a-f]{24}$`},
		{"request log", RequestLog, `^log_[0-9a-f]{24}$`},
		{"async request", AsyncRequest, `^[0-9a-f]{32}$`},
		{"async owner", AsyncOwner, `^[0-9a-f]{8}$`},
		{"dashboard session", DashboardSession, `^[A-Za-z0-9_-]{43}$`},
		{"federated key prefix", FederatedKey, `^mgk_[0-9A-Za-z]{12}$`},
		{"workspace key prefix", WorkspaceKey, `^mgw_[0-9A-Za-z]{12}$`},
		{"key secret", KeySecret, `^[0-9A-Za-z]{32}$`},
	} {
		re := regexp.MustCompile(tc.re)
		seen := map[string]bool{}
		for range 50 {
			id := New(tc.kind)
			if !re.MatchString(id) {
				t.Fatalf("%s: %q does not match %s", tc.name, id, tc.re)
			}
			if seen[id] {
				t.Fatalf("%s: %q minted twice", tc.name, id)
			}
			seen[id] = true
		}
	}
}

// TestRandomDropsBiasedBytes: with 62 characters, bytes 248 to 255 would favour the first eight, so they are
// dropped and more bytes are read; below 248 a byte picks its value modulo the alphabet's length.
func TestRandomDropsBiasedBytes(t *testing.T) {
	stream := []byte{255, 248, 0, 61, 250, 251, 252, 253, 254, 249, 62, 247, 1}
	reads := 0
	defer func(old func([]byte)) { read = old }(read)
	read = func(b []byte) {
		for i := range b {
			b[i] = stream[reads%len(stream)]
			reads++
		}
	}
	// 247 % 62 = 61: the last character, 'z'.
	if got := Random(Base62, 5); got != "0z0z1" {
		t.Fatalf("Random(Base62, 5) = %q, want %q", got, "0z0z1")
	}
	if reads != 20 {
		t.Fatalf("read %d bytes, want two buffers of 10 (the first holds only 2 usable bytes)", reads)
	}
}
