package gatewayd

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestRewriteBody(t *testing.T) {
	for _, tc := range []struct {
		name, in, target string
		stream           bool
		want             string
	}{
		{"untouched", `{"model":"a", "x" : [1, 2.50]}`, "", false, `{"model":"a", "x" : [1, 2.50]}`},
		{"target model", `{"x":1,"model":"a","y":{"z":1e3}}`, "b", false, `{"x":1,"model":"b","y":{"z":1e3}}`},
		{"stream adds options", `{"model":"a","stream":true}`, "", true, `{"model":"a","stream":true,"stream_options":{"include_usage":true}}`},
		{"stream forces usage", `{"stream_options":{"include_usage":false,"other":1},"model":"a"}`, "", true, `{"stream_options":{"include_usage":true,"other":1},"model":"a"}`},
		{"stream null options", `{"stream_options":null}`, "", true, `{"stream_options":{"include_usage":true}}`},
		{"empty object", `{}`, "b", true, `{"stream_options":{"include_usage":true}}`},
	} {
		got, err := rewriteBody([]byte(tc.in), tc.target, tc.stream)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{`[]`, `"x"`, `{"stream_options":3}`, `{"a":}`} {
		if _, err := rewriteBody([]byte(bad), "b", true); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func FuzzRewriteBody(f *testing.F) {
	f.Add([]byte(`{"model":"a","stream":true,"stream_options":{"include_usage":false}}`), "t", true)
	f.Add([]byte(`{"x":[{"y":null}]}`), "", false)
	f.Fuzz(func(t *testing.T, body []byte, target string, stream bool) {
		out, err := rewriteBody(body, target, stream)
		if err != nil || (target == "" && !stream) {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(out, &m) != nil {
			// Only bodies that were objects to begin with reach here; duplicate keys are kept as sent.
			if json.Valid(body) {
				t.Fatalf("valid %q rewrote to invalid %q", body, out)
			}
		}
	})
}

// TestRelayStreamStripsUsage: the usage chunk is read and hidden, every other event passes as sent.
func TestRelayStreamStripsUsage(t *testing.T) {
	in := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
		": keep-alive comment\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\n" +
		"data: [DONE]\n\n"
	for _, wantUsage := range []bool{false, true} {
		rec := &recorder{}
		d := newDeadline(timeoutForTests, func() {})
		u, ok := relayStream(&statusWriter{ResponseWriter: rec}, strings.NewReader(in), d, wantUsage)
		d.timer.Stop()
		if !ok || u.total() != 7 {
			t.Fatalf("usage %+v ok %v", u, ok)
		}
		if got := strings.Contains(rec.buf.String(), "prompt_tokens"); got != wantUsage {
			t.Errorf("include_usage=%v: usage chunk relayed = %v:\n%s", wantUsage, got, rec.buf.String())
		}
		if !strings.Contains(rec.buf.String(), "keep-alive") || !strings.HasSuffix(rec.buf.String(), "data: [DONE]\n\n") {
			t.Errorf("events lost:\n%s", rec.buf.String())
		}
		if rec.flushes < 3 {
			t.Errorf("flushed %d times, want one flush per event", rec.flushes)
		}
	}
}

const timeoutForTests = 1 << 40

type recorder struct {
	buf     bytes.Buffer
	flushes int
	header  http.Header
}

func (r *recorder) Header() http.Header {
	if r.header == nil {
		r.header = http.Header{}
	}
	return r.header
}
func (r *recorder) Write(b []byte) (int, error) { return r.buf.Write(b) }
func (r *recorder) WriteHeader(int)             {}
func (r *recorder) Flush()                      { r.flushes++ }
