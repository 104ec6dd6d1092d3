package netguard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url   string
		allow bool
		want  string // "" = allowed, else a part of the reason
	}{
		{"https://hooks.example.com/a?b=c", false, ""},
		{"https://203.0.113.7:8443/x", false, ""},
		{"http://hooks.example.com/a", false, "https"},
		{"ftp://hooks.example.com/a", false, "absolute https"},
		{"/relative", false, "absolute https"},
		{"https://", false, "absolute https"},
		{"https://localhost/x", false, "loopback"},
		{"https://api.localhost/x", false, "loopback"},
		{"https://127.0.0.1/x", false, "loopback"},
		{"https://[::1]/x", false, "loopback"},
		{"https://10.1.2.3/x", false, "internal"},
		{"https://172.16.0.1/x", false, "internal"},
		{"https://192.168.1.1/x", false, "internal"},
		{"https://169.254.169.254/latest/meta-data", false, "internal"},
		{"https://[fe80::1]/x", false, "internal"},
		{"https://[fd00::1]/x", false, "internal"},
		{"https://[::ffff:10.0.0.1]/x", false, "internal"},
		{"https://100.64.0.1/x", false, "internal"},
		{"https://0.0.0.0/x", false, "internal"},
		{"https://10.1.2.3/x", true, ""},
		{"http://127.0.0.1:9000/x", true, ""},
		{"http://localhost:9000/x", true, ""},
		{"http://10.1.2.3/x", true, ""},
		{"http://[fd00::1]:8080/x", true, ""},
		{"http://203.0.113.7/x", true, "https"},
		{"http://hooks.example.com/a", true, "https"},
		{"https://x.example.com/" + strings.Repeat("a", 2048), false, "at most"},
	} {
		err := CheckURL(tc.url, tc.allow)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s (allow %v): refused: %v", tc.url, tc.allow, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s (allow %v): got %v, want a refusal about %q", tc.url, tc.allow, err, tc.want)
		}
	}
}

// TestClientRefusesInternalAtDialTime: a name that resolves to loopback passes CheckURL, and the guarded
// client refuses the connection; the client that allows internal addresses reaches the same server.
func TestClientRefusesInternalAtDialTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	if _, err := Client(false).Get(srv.URL); err == nil || !strings.Contains(err.Error(), "internal address") {
		t.Fatalf("guarded client reached %s: %v", srv.URL, err)
	}
	resp, err := Client(true).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
