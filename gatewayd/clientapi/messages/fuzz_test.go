package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
)

// FuzzMessagesRequest: any body either translates into an OpenAI chat body that is valid JSON with messages, or
// is refused; never a panic.
func FuzzMessagesRequest(f *testing.F) {
	f.Add(providertest.Read(f, "basic.anthropic.json"))
	f.Add(providertest.Read(f, "tools.anthropic.json"))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, _, err := Request(body)
		if err != nil {
			return
		}
		var req struct{ Messages []json.RawMessage }
		if json.Unmarshal(out, &req) != nil || len(req.Messages) == 0 {
			t.Fatalf("%s translated into %s", body, out)
		}
	})
}

// FuzzMessagesStream: OpenAI chunks carrying the fuzzed text in pieces, written to the Writer in pieces of a
// fuzzed size, become Messages' events whose text deltas are exactly the text, in order, with usage never
// negative; and arbitrary bytes never make the Writer panic.
func FuzzMessagesStream(f *testing.F) {
	f.Add("Hello, world", 3, 7, int64(25), int64(15), []byte(nil))
	f.Add("ünïcode ✓ \"q\"\n\n", 1, 1, int64(-3), int64(-9), providertest.Read(f, "stream.openai.sse"))
	f.Fuzz(func(t *testing.T, text string, pieces, write int, in, out int64, raw []byte) {
		w := NewWriter(httptest.NewRecorder())
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = w.Write(raw)
		w.Finish()
		if !utf8.ValidString(text) {
			return
		}
		pieces, write = 1+max(pieces, 0)%8, 1+max(write, 0)%97
		var sse bytes.Buffer
		chunk := func(v any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(&sse, "data: %s\n\n", b)
		}
		runes := []rune(text)
		step := max(1, (len(runes)+pieces-1)/pieces)
		for i := 0; i < len(runes); i += step {
			chunk(map[string]any{"id": "c", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": string(runes[i:min(i+step, len(runes))])}}}})
		}
		chunk(map[string]any{"id": "c", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
		chunk(map[string]any{"id": "c", "choices": []any{}, "usage": map[string]any{"prompt_tokens": in, "completion_tokens": out}})
		sse.WriteString("data: [DONE]\n\n")
		rec := httptest.NewRecorder()
		w = NewWriter(rec)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for b := sse.Bytes(); len(b) > 0; b = b[min(write, len(b)):] {
			_, _ = w.Write(b[:min(write, len(b))])
		}
		w.Finish()
		var got strings.Builder
		events := splitEvents(rec.Body.Bytes())
		for _, e := range events {
			var ev struct {
				Delta struct{ Text string }
				Usage *messageUsage
			}
			if err := json.Unmarshal(e.data, &ev); err != nil {
				t.Fatal(err)
			}
			got.WriteString(ev.Delta.Text)
			if ev.Usage != nil && (ev.Usage.InputTokens < 0 || ev.Usage.OutputTokens < 0) {
				t.Fatalf("negative usage in %s", e.data)
			}
		}
		if got.String() != text || !w.Done() || events[len(events)-1].name != "message_stop" {
			t.Fatalf("text %q came out as %q: %s", text, got.String(), rec.Body.String())
		}
	})
}
