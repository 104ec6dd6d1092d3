package anthropic

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// Answer is a Messages answer, as much of it as an OpenAI answer can say.
type Answer struct {
	ID         string  `json:"id"`
	Model      string  `json:"model"`
	Content    []Block `json:"content"`
	StopReason string  `json:"stop_reason"`
	Usage      usage   `json:"usage"`
}

// translation turns a Messages answer into OpenAI's.
type translation struct{}

// FinishReason is OpenAI's finish_reason of a Messages stop_reason.
func FinishReason(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop"
}

// Answer translates a whole Messages answer: its text blocks joined into the message's content, its tool_use
// blocks as tool calls; other blocks (thinking) have no place in an OpenAI answer.
func (translation) Answer(body []byte) ([]byte, upstream.Usage, error) {
	var a Answer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, upstream.Usage{}, err
	}
	if a.Content == nil && a.ID == "" {
		return nil, upstream.Usage{}, errors.New("not a Messages answer")
	}
	u := a.Usage.of()
	msg := openai.AssistantMessage{Role: "assistant"}
	var text strings.Builder
	hasText := false
	for _, b := range a.Content {
		switch b.Type {
		case "text":
			if b.Text != nil {
				text.WriteString(*b.Text)
				hasText = true
			}
		case "tool_use":
			input := string(b.Input)
			if input == "" {
				input = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: b.ID, Type: "function", Function: openai.FunctionCall{Name: b.Name, Arguments: input}})
		}
	}
	if hasText || len(msg.ToolCalls) == 0 {
		s := text.String()
		msg.Content = &s
	}
	finish := FinishReason(a.StopReason)
	out, err := json.Marshal(openai.ChatCompletion{ID: a.ID, Object: openai.ObjectCompletion, Created: time.Now().Unix(), Model: a.Model,
		Choices: []openai.ChatChoice{{Message: msg, FinishReason: finish}}, Usage: openai.UsageOf(u)})
	return out, u, err
}

// maxErrorMessage bounds an upstream message passed on when its error is not Anthropic's JSON.
const maxErrorMessage = 512

// Error translates Anthropic's error {"type":"error","error":{"type","message"}} into OpenAI's envelope, with
// Anthropic's error type as both type and code; a body of another shape is passed on as the message.
func (translation) Error(status int, body []byte) []byte {
	var e struct {
		Error struct{ Type, Message string }
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		msg := strings.ToValidUTF8(string(body[:min(len(body), maxErrorMessage)]), "?")
		if strings.TrimSpace(msg) == "" {
			msg = http.StatusText(status)
		}
		return upstream.ErrorEnvelope(msg, "upstream_error", "upstream_error")
	}
	return upstream.ErrorEnvelope(e.Error.Message, e.Error.Type, e.Error.Type)
}

// Stream translates Anthropic's events (stream.go).
func (translation) Stream(r io.Reader, emit func([]byte) error, clientWantsUsage bool) (upstream.Usage, error) {
	s := streamer{out: openai.ChunkWriter{Emit: emit, Created: time.Now().Unix()}, emit: emit, toolIndex: map[int]int{}}
	err := upstream.ReadEvents(r, s.event)
	if err == nil && !s.stopped {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && clientWantsUsage {
		err = s.out.Usage(openai.UsageOf(s.usage.of()))
	}
	return s.usage.of(), err
}
