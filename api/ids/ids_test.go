package ids

import (
	"regexp"
	"testing"
)

// formats are the wire formats clients and stored data know, by kind: a changed row of the table fails here.
var formats = map[string]Kind{
	`^grp-[0-9a-z]{16}$`:    Group,
	`^key-[0-9a-z]{16}$`:    FederatedKeyName,
	`^ep-[0-9a-z]{16}$`:     Endpoint,
	`^wk-[0-9a-z]{16}$`:     WorkspaceKeyName,
	`^sib-[0-9a-z]{16}$`:    SandboxImageBuild,
	`^req_[0-9a-f]{24}$`:    Request,
	`^evt_[0-9a-f]{24}$`:    BillingEvent,
	`^log_[0-9a-f]{24}$`:    RequestLog,
	`^[0-9a-f]{32}$`:        AsyncRequest,
	`^[0-9a-f]{8}$`:         AsyncOwner,
	`^[A-Za-z0-9_-]{43}$`:   DashboardSession,
	`^mgk_[0-9A-Za-z]{12}$`: FederatedKey,
	`^mgw_[0-9A-Za-z]{12}$`: WorkspaceKey,
	`^[0-9A-Za-z]{32}$`:     KeySecret,
}

// TestFormats: every kind mints ids of its format, never the same one twice.
func TestFormats(t *testing.T) {
	for format, kind := range formats {
		re := regexp.MustCompile(format)
		seen := map[string]bool{}
		for range 50 {
			id := New(kind)
			if !re.MatchString(id) || seen[id] {
				t.Fatalf("kind %+v minted %q: want %s, never twice", kind, id, format)
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
