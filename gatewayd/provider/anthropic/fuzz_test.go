package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
)

// FuzzAnthropicRequest: any body either translates into a Messages request that is valid JSON with a positive
// max_tokens, or is refused; never a panic.
func FuzzAnthropicRequest(f *testing.F) {
	for _, name := range []string{"basic", "system", "tools", "image"} {
		f.Add(providertest.Read(f, name+".openai.json"))
	}
	f.Add([]byte(`{"messages":[{"role":"tool","content":[{"type":"text","text":"x"}]}],"stop":["a",1]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := TranslateRequest(body, "m")
		if err != nil {
			return
		}
		var req struct {
			MaxTokens int64 `json:"max_tokens"`
			Messages  []json.RawMessage
		}
		if json.Unmarshal(out, &req) != nil || req.MaxTokens <= 0 || len(req.Messages) == 0 {
			t.Fatalf("%s translated into %s", body, out)
		}
	})
}

// FuzzAnthropicStream: a stream of Anthropic's events carrying the fuzzed text in pieces, with fuzzed usage
// counts, translates into OpenAI chunks whose content is exactly the text, in order; its usage is never negative;
// and arbitrary bytes never make it panic.
func FuzzAnthropicStream(f *testing.F) {
	f.Add("Hello, world", 3, int64(25), int64(15), int64(0), []byte(nil))
	f.Add("ünïcode ✓ and \"quotes\"\n", 1, int64(-5), int64(-1), int64(7), providertest.Read(f, "tool-stream.anthropic.sse"))
	f.Fuzz(func(t *testing.T, text string, pieces int, in, out, cache int64, raw []byte) {
		_, _, _ = streamOf(raw, true) // arbitrary bytes: no panic
		if !utf8.ValidString(text) {
			return
		}
		pieces = 1 + max(pieces, 0)%8
		var sse bytes.Buffer
		ev := func(v any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(&sse, "event: x\ndata: %s\n\n", b)
		}
		ev(map[string]any{"type": "message_start", "message": map[string]any{"id": "m", "model": "c", "content": []any{},
			"usage": map[string]any{"input_tokens": in, "output_tokens": 1, "cache_read_input_tokens": cache}}})
		ev(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		runes := []rune(text)
		step := max(1, (len(runes)+pieces-1)/pieces)
		for i := 0; i < len(runes); i += step {
			ev(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": string(runes[i:min(i+step, len(runes))])}})
		}
		ev(map[string]any{"type": "content_block_stop", "index": 0})
		ev(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]any{"output_tokens": out}})
		ev(map[string]any{"type": "message_stop"})
		got, u, err := streamOf(sse.Bytes(), true)
		if err != nil {
			t.Fatal(err)
		}
		if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < 0 {
			t.Fatalf("negative usage %+v", u)
		}
		var b strings.Builder
		for _, c := range chunks(t, got) {
			if c.Usage != nil && (c.Usage.PromptTokens < 0 || c.Usage.CompletionTokens < 0) {
				t.Fatalf("negative usage chunk %+v", c.Usage)
			}
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					b.WriteString(*ch.Delta.Content)
				}
			}
		}
		if b.String() != text {
			t.Fatalf("text %q came out as %q", text, b.String())
		}
	})
}

// FuzzAnthropicAnswer: any answer body translates or fails, with usage never negative; never a panic.
func FuzzAnthropicAnswer(f *testing.F) {
	f.Add(providertest.Read(f, "answer.anthropic.json"))
	f.Add(providertest.Read(f, "tool-answer.anthropic.json"))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, u, err := translation{}.Answer(body)
		_ = translation{}.Error(400, body)
		if err != nil {
			return
		}
		if u.PromptTokens < 0 || u.CompletionTokens < 0 || !json.Valid(out) {
			t.Fatalf("%s: usage %+v, answer %s", body, u, out)
		}
	})
}
