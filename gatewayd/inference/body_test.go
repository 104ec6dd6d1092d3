package inference

import (
	"encoding/json"
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
