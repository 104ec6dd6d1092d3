package upstream

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// testDialect is a Dialect for the relay's tests: usage as OpenAI-compatible servers report it, read with
// encoding/json, and a usage event with no choices kept only when the client asked for it. The providers' own
// readers are tested in their packages.
type testDialect struct{}

func (testDialect) Authorize(h http.Header, key string) { h.Set("Authorization", "Bearer "+key) }

func (testDialect) AnswerUsage(body []byte) (Usage, bool) {
	u, ok, _ := testUsage(body)
	return u, ok
}

func (testDialect) EventUsage(event []byte, clientWantsUsage bool) (Usage, bool, bool) {
	if !bytes.Contains(event, []byte("prompt_tokens")) {
		return Usage{}, false, true
	}
	u, ok, noChoices := testUsage(EventData(event))
	return u, ok, !ok || !noChoices || clientWantsUsage
}

func testUsage(b []byte) (Usage, bool, bool) {
	var v struct {
		Choices []json.RawMessage
		Usage   *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		}
	}
	if json.Unmarshal(b, &v) != nil || v.Usage == nil {
		return Usage{}, false, false
	}
	return Usage{PromptTokens: v.Usage.PromptTokens, CompletionTokens: v.Usage.CompletionTokens}, true, len(v.Choices) == 0
}
