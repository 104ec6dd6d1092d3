package messages

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// Writer is the http.ResponseWriter of a /v1/messages call: what the OpenAI call path writes into it (an answer,
// a stream of chunks, or an error in either the model-call envelope or an upstream's OpenAI envelope) reaches the
// client in Messages' shape. A whole answer or error is held until Finish; a stream is rewritten event by event
// as it is written, and flushed as the call path flushes.
type Writer struct {
	w      http.ResponseWriter
	status int
	stream bool
	body   bytes.Buffer
	// pending holds the part of a streamed SSE event not yet complete.
	pending []byte
	s       streamState
}

// NewWriter returns the Writer of one call answering to w.
func NewWriter(w http.ResponseWriter) *Writer { return &Writer{w: w} }

// Header is the answer's headers.
func (m *Writer) Header() http.Header { return m.w.Header() }

// WriteHeader starts the answer: a 2xx event stream goes out at once, anything else waits for Finish.
func (m *Writer) WriteHeader(code int) {
	if m.status != 0 {
		return
	}
	m.status = code
	h := m.w.Header()
	if code < 400 && strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		m.stream = true
		h.Del("Content-Length")
		m.w.WriteHeader(code)
	}
}

// Write takes a piece of the OpenAI answer.
func (m *Writer) Write(b []byte) (int, error) {
	if m.status == 0 {
		m.WriteHeader(http.StatusOK)
	}
	if !m.stream {
		return m.body.Write(b)
	}
	m.pending = append(m.pending, b...)
	for {
		i := bytes.Index(m.pending, []byte("\n\n"))
		if i < 0 {
			return len(b), nil
		}
		data := upstream.EventData(m.pending[:i+2])
		m.pending = m.pending[i+2:]
		if len(data) == 0 {
			continue
		}
		out := m.s.chunk(data)
		if len(out) > 0 {
			if _, err := m.w.Write(out); err != nil {
				return 0, err
			}
		}
	}
}

// Flush sends what was written of a stream.
func (m *Writer) Flush() {
	if f, ok := m.w.(http.Flusher); ok && m.stream {
		f.Flush()
	}
}

// Unwrap is the client's ResponseWriter.
func (m *Writer) Unwrap() http.ResponseWriter { return m.w }

// Finish writes a held answer or error in Messages' shape; a stream was written as it came.
func (m *Writer) Finish() {
	if m.stream || m.status == 0 || m.status == 499 {
		if m.status == 499 {
			m.w.WriteHeader(m.status)
		}
		return
	}
	var out []byte
	if m.status >= 400 {
		out = ErrorBody(m.status, m.body.Bytes())
	} else if a, err := Answer(m.body.Bytes()); err == nil {
		out = a
	} else {
		m.status = http.StatusBadGateway
		out = errorJSON(m.status, "The model's answer could not be read: "+err.Error())
	}
	h := m.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(out)))
	m.w.WriteHeader(m.status)
	_, _ = m.w.Write(out)
}

// ErrorType is Messages' error type of a status.
func ErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

func errorJSON(status int, message string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": ErrorType(status), "message": message}})
	return b
}

// ErrorBody is Messages' error {"type":"error","error":{"type","message"}} of an error answer: gatewayd's
// model-call envelope (its error and detail) or an upstream's OpenAI envelope (its message).
func ErrorBody(status int, body []byte) []byte {
	var e struct {
		Error  json.RawMessage
		Detail string
	}
	msg := http.StatusText(status)
	if json.Unmarshal(body, &e) == nil && len(e.Error) > 0 {
		var s string
		var obj struct{ Message string }
		switch {
		case json.Unmarshal(e.Error, &s) == nil:
			msg = s
			if e.Detail != "" {
				msg += " " + e.Detail
			}
		case json.Unmarshal(e.Error, &obj) == nil && obj.Message != "":
			msg = obj.Message
		}
	}
	return errorJSON(status, msg)
}

// chatAnswer is as much of an OpenAI chat answer or chunk as Messages' answer says.
type chatAnswer struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message      *chatAnswerMessage `json:"message"`
		Delta        *chatAnswerMessage `json:"delta"`
		FinishReason *string            `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type chatAnswerMessage struct {
	Content   *string `json:"content"`
	ToolCalls []struct {
		Index    int    `json:"index"`
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// message is Messages' answer.
type message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []contentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        messageUsage   `json:"usage"`
}

type contentBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type messageUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// StopReason is Messages' stop_reason of an OpenAI finish_reason.
func StopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// Answer translates a whole OpenAI chat answer into Messages' answer.
func Answer(body []byte) ([]byte, error) {
	var a chatAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, err
	}
	msg := message{ID: a.ID, Type: "message", Role: "assistant", Model: a.Model, Content: []contentBlock{}}
	if len(a.Choices) > 0 {
		c := a.Choices[0]
		if c.Message != nil {
			if c.Message.Content != nil && *c.Message.Content != "" {
				msg.Content = append(msg.Content, contentBlock{Type: "text", Text: c.Message.Content})
			}
			for _, tc := range c.Message.ToolCalls {
				msg.Content = append(msg.Content, contentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: toolInput(tc.Function.Arguments)})
			}
		}
		if c.FinishReason != nil {
			s := StopReason(*c.FinishReason)
			msg.StopReason = &s
		}
	}
	if a.Usage != nil {
		msg.Usage = messageUsage{InputTokens: max(a.Usage.PromptTokens, 0), OutputTokens: max(a.Usage.CompletionTokens, 0)}
	}
	return json.Marshal(&msg)
}

// toolInput is a tool call's arguments as a tool_use block's input: the JSON object the model wrote, or an empty
// object when it wrote none or no valid JSON object.
func toolInput(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}
