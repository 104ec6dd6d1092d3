package stdwebhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// TestSignMatchesStandardWebhooksVector checks Sign against the test vector of the Standard Webhooks
// reference libraries.
func TestSignMatchesStandardWebhooksVector(t *testing.T) {
	got := Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

// TestPost: the message goes out with the three Standard Webhooks headers over its body, and only a 2xx answer
// counts as delivered.
func TestPost(t *testing.T) {
	status := http.StatusNoContent
	var got http.Header
	var gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, gotBody = r.Header.Clone(), string(b)
		w.WriteHeader(status)
	}))
	defer srv.Close()
	body := []byte(`{"a":1}`)
	if err := Post(context.Background(), srv.Client(), time.Second, srv.URL, "secret", "msg_1", 1700000000, body); err != nil {
		t.Fatalf("Post to a 204: %v", err)
	}
	if gotBody != string(body) || got.Get("webhook-id") != "msg_1" || got.Get("webhook-timestamp") != strconv.Itoa(1700000000) ||
		got.Get("webhook-signature") != Sign("secret", "msg_1", 1700000000, body) || got.Get("Content-Type") != "application/json" {
		t.Fatalf("received body %q, headers %v", gotBody, got)
	}
	status = http.StatusInternalServerError
	if err := Post(context.Background(), srv.Client(), time.Second, srv.URL, "secret", "msg_1", 1700000000, body); err == nil {
		t.Fatal("Post to a 500 succeeded")
	}
}
