package messages

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// TestRequestGolden translates Messages requests into OpenAI chat bodies.
func TestRequestGolden(t *testing.T) {
	for _, name := range []string{"basic", "tools"} {
		in := providertest.Read(t, name+".anthropic.json")
		got, stream, err := Request(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		providertest.SameJSON(t, name, got, providertest.Read(t, name+".openai.json"))
		if stream != (name == "tools") {
			t.Errorf("%s: stream %v", name, stream)
		}
		// The SDK's params read the request, so it is one the SDK can send.
		var params sdk.MessageNewParams
		if err := json.Unmarshal(in, &params); err != nil || len(params.Messages) == 0 {
			t.Errorf("%s: the SDK cannot read the golden request: %v", name, err)
		}
	}
}

// TestRequestRefusals: a member OpenAI's chat body cannot express is refused naming it.
func TestRequestRefusals(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for body, field := range map[string]string{
		`{"model":"m","max_tokens":10,` + msgs + `,"top_k":5}`:                                          "top_k",
		`{"model":"m","max_tokens":10,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":1024}}`: "thinking",
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[]}]}`:                       "messages[0].content",
		`{"model":"m",` + msgs + `}`:     "max_tokens",
		`{"max_tokens":10,` + msgs + `}`: "model",
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`: "messages[0].content[0].cache_control",
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document"}]}]}`:                                              "messages[0].content[0].type",
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","is_error":true}]}]}`:         "messages[0].content[0].is_error",
		`{"model":"m","max_tokens":10,` + msgs + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`:                                 "tools[0].type",
		`{"model":"m","max_tokens":10,` + msgs + `,"metadata":{"tenant":"x"}}`:                                                                    "metadata.tenant",
	} {
		_, _, err := Request([]byte(body))
		var r *Refused
		if !errors.As(err, &r) || r.Field != field {
			t.Errorf("%s: %v, want a refusal of %s", body, err, field)
		}
	}
}

// TestAnswerGolden rewrites an OpenAI answer into Messages' answer, which the SDK reads back.
func TestAnswerGolden(t *testing.T) {
	got, err := Answer(providertest.Read(t, "answer.openai.json"))
	if err != nil {
		t.Fatal(err)
	}
	providertest.SameJSON(t, "answer", got, providertest.Read(t, "answer.anthropic.json"))
	var m sdk.Message
	if err := json.Unmarshal(got, &m); err != nil || m.StopReason != sdk.StopReasonToolUse || m.Usage.InputTokens != 384 ||
		len(m.Content) != 2 || m.Content[1].Name != "get_weather" {
		t.Errorf("the SDK reads %+v (%v)", m, err)
	}
}

// TestStreamGolden rewrites OpenAI chunks into Messages' events, written in pieces that split events anywhere,
// and the SDK accumulates them into the answer they tell.
func TestStreamGolden(t *testing.T) {
	in := providertest.Read(t, "stream.openai.sse")
	for _, piece := range []int{len(in), 1, 7, 64} {
		rec := httptest.NewRecorder()
		w := NewWriter(rec)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for b := in; len(b) > 0; {
			n := min(piece, len(b))
			if _, err := w.Write(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
		w.Finish()
		got := splitEvents(rec.Body.Bytes())
		want := splitEvents(providertest.Read(t, "stream.anthropic.sse"))
		if len(got) != len(want) {
			t.Fatalf("pieces of %d: %d events, want %d:\n%s", piece, len(got), len(want), rec.Body.String())
		}
		for i := range want {
			if got[i].name != want[i].name {
				t.Errorf("event %d: %s, want %s", i, got[i].name, want[i].name)
			}
			providertest.SameJSON(t, want[i].name, got[i].data, want[i].data)
		}
		if !w.Done() {
			t.Error("not done")
		}
		var acc sdk.Message
		for _, e := range got {
			var ev sdk.MessageStreamEventUnion
			if err := json.Unmarshal(e.data, &ev); err != nil {
				t.Fatal(err)
			}
			if err := acc.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
		}
		if acc.Content[0].Text != "Hello!" || string(acc.Content[1].Input) != `{"location": "SF"}` || acc.Usage.OutputTokens != 15 || acc.StopReason != sdk.StopReasonToolUse {
			t.Errorf("the SDK accumulates %+v", acc)
		}
	}
}

type sse struct {
	name string
	data []byte
}

func splitEvents(b []byte) []sse {
	var out []sse
	for ev := range strings.SplitSeq(string(b), "\n\n") {
		var e sse
		for line := range strings.SplitSeq(ev, "\n") {
			if n, ok := strings.CutPrefix(line, "event: "); ok {
				e.name = n
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				e.data = []byte(d)
			}
		}
		if e.name != "" {
			out = append(out, e)
		}
	}
	return out
}

// TestErrors: gatewayd's model-call envelope and an upstream's OpenAI envelope both reach the client in Messages'
// error shape, with the status kept.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		status   int
		body     string
		typ, msg string
	}{
		{401, `{"error":"Invalid API key.","error_code":"unauthorized","detail":""}`, "authentication_error", "Invalid API key."},
		{429, `{"error":"Usage limit exceeded.","error_code":"usage_limit_exceeded","detail":"limit: DAY"}`, "rate_limit_error", "Usage limit exceeded. limit: DAY"},
		{404, string(upstream.ErrorEnvelope("no such model", "invalid_request_error", "model_not_found")), "not_found_error", "no such model"},
		{502, `not json`, "api_error", "Bad Gateway"},
	} {
		rec := httptest.NewRecorder()
		w := NewWriter(rec)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(tc.status)
		_, _ = w.Write([]byte(tc.body))
		w.Finish()
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if rec.Code != tc.status || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Type != "error" || e.Error.Type != tc.typ || e.Error.Message != tc.msg {
			t.Errorf("%d %s: answered %d %s", tc.status, tc.body, rec.Code, rec.Body)
		}
		if n := rec.Header().Get("Content-Length"); n != strconv.Itoa(rec.Body.Len()) {
			t.Errorf("Content-Length %s for %d bytes", n, rec.Body.Len())
		}
	}
}
