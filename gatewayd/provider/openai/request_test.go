package openai

import (
	stdjson "encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
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
		got, err := RewriteBody([]byte(tc.in), tc.target, tc.stream)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{`[]`, `"x"`, `{"stream_options":3}`, `{"a":}`} {
		if _, err := RewriteBody([]byte(bad), "b", true); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func FuzzRewriteBody(f *testing.F) {
	f.Add([]byte(`{"model":"a","stream":true,"stream_options":{"include_usage":false}}`), "t", true)
	f.Add([]byte(`{"x":[{"y":null}]}`), "", false)
	f.Fuzz(func(t *testing.T, body []byte, target string, stream bool) {
		out, err := RewriteBody(body, target, stream)
		if err != nil || (target == "" && !stream) {
			return
		}
		var m map[string]stdjson.RawMessage
		if stdjson.Unmarshal(out, &m) != nil {
			// Only bodies that were objects to begin with reach here; duplicate keys are kept as sent.
			if stdjson.Valid(body) {
				t.Fatalf("valid %q rewrote to invalid %q", body, out)
			}
		}
	})
}

// TestParseRequestRefusesAmbiguity: a body that an upstream could read differently from gatewayd is refused.
func TestParseRequestRefusesAmbiguity(t *testing.T) {
	for _, bad := range []string{
		`{"stream":true,"Stream":false}`,
		`{"model":"a","Model":"b"}`,
		`{"MODEL":"b"}`,
		`{"model":"a","model":"b"}`,
		`{"model":"a","x":{"y":1,"y":2}}`,
		`{"stream_options":{"include_usage":true,"Include_Usage":false}}`,
		`{"Stream_Options":{"include_usage":false}}`,
		`{"mod\u0065l":"a","model":"b"}`,
		`{"model":"a"} {}`,
		"{\"model\":\"a\xff\"}",
		`{"model":1}`,
		`{"stream":"yes"}`,
	} {
		if req, err := ParseRequest([]byte(bad)); err == nil {
			t.Errorf("%s: accepted as %+v", bad, req)
		}
	}
	req, err := ParseRequest([]byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"Models":1,"x":[1e999,{"Model":2}]}`))
	if err != nil || req.Model != "m" || !req.Stream || !req.WantsUsage() {
		t.Fatalf("got %+v, %v", req, err)
	}
}

// FuzzInferenceBody: whenever gatewayd accepts a body, what it forwards is read the same by a strict,
// case-sensitive upstream and by a lenient one that matches names in any case and keeps the last duplicate (Go's
// encoding/json v1, like many Python and JavaScript servers): the same model, the same stream flag, and the usage
// chunk asked for whenever gatewayd streams. Seeds cover duplicate and case-variant keys, deep nesting and huge
// numbers.
func FuzzInferenceBody(f *testing.F) {
	for _, seed := range []string{
		`{"model":"a","stream":true,"Stream":false}`,
		`{"model":"a","Model":"b"}`,
		`{"model":"a","model":"b"}`,
		`{"model":"a","stream":true,"stream_options":{"include_usage":false,"INCLUDE_USAGE":true}}`,
		`{"model":"a","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`,
		`{"model":"a","n":123456789012345678901234567890e300,"stream":true}`,
		`{"model":"a","stream_options":null,"stream":true}`,
	} {
		f.Add([]byte(seed), "")
		f.Add([]byte(seed), "target")
	}
	f.Fuzz(func(t *testing.T, body []byte, target string) {
		req, err := ParseRequest(body)
		if err != nil || req.Model == "" || !utf8.ValidString(target) {
			// A call without a model is refused before anything is forwarded, and an Endpoint's target model
			// comes from the API server, which holds valid UTF-8 only.
			return
		}
		out, err := RewriteBody(body, target, req.Stream)
		if err != nil {
			t.Fatalf("accepted %q but could not rewrite it: %v", body, err)
		}
		wantModel := req.Model
		if target != "" {
			wantModel = target
		}
		type upstreamView struct {
			Model         string `json:"model"`
			Stream        bool   `json:"stream"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		var lenient upstreamView
		if err := stdjson.Unmarshal(out, &lenient); err != nil {
			t.Fatalf("forwarded %q, which a lenient upstream refuses: %v", out, err)
		}
		strict, err := ParseRequest(out)
		if err != nil {
			t.Fatalf("forwarded %q, which gatewayd itself refuses: %v", out, err)
		}
		for name, got := range map[string]upstreamView{"lenient": lenient, "strict": {Model: strict.Model, Stream: strict.Stream}} {
			if got.Model != wantModel || got.Stream != req.Stream {
				t.Fatalf("%s upstream reads model %q stream %v from %q; gatewayd checked model %q stream %v", name, got.Model, got.Stream, out, wantModel, req.Stream)
			}
		}
		if req.Stream && (lenient.StreamOptions == nil || !lenient.StreamOptions.IncludeUsage || !strict.WantsUsage()) {
			t.Fatalf("streamed %q without asking for the usage chunk", out)
		}
	})
}
