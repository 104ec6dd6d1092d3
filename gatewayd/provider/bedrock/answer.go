package bedrock

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	json "github.com/go-json-experiment/json"

	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// converseResponse is Converse's answer, the members gatewayd reads.
type converseResponse struct {
	Output struct {
		Message *message `json:"message"`
	} `json:"output"`
	StopReason string      `json:"stopReason"`
	Usage      *tokenUsage `json:"usage"`
}

type tokenUsage struct {
	InputTokens           int64 `json:"inputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	TotalTokens           int64 `json:"totalTokens"`
	CacheReadInputTokens  int64 `json:"cacheReadInputTokens"`
	CacheWriteInputTokens int64 `json:"cacheWriteInputTokens"`
}

// usage is what a call is charged: the tokens read from and written to the prompt cache count as input, as
// Anthropic's do. A negative count is read as 0.
func (t *tokenUsage) usage() upstream.Usage {
	if t == nil {
		return upstream.Usage{}
	}
	u := upstream.Usage{PromptTokens: max(t.InputTokens, 0) + max(t.CacheReadInputTokens, 0) + max(t.CacheWriteInputTokens, 0),
		CompletionTokens: max(t.OutputTokens, 0)}
	u.TotalTokens = max(t.TotalTokens, u.PromptTokens+u.CompletionTokens)
	return u
}

// finishReason maps Converse's stopReason onto OpenAI's finish_reason.
func finishReason(stop string) string {
	switch stop {
	case "tool_use":
		return openai.FinishToolCalls
	case "max_tokens", "model_context_window_exceeded":
		return openai.FinishLength
	case "guardrail_intervened", "content_filtered":
		return openai.FinishContentFilter
	}
	return openai.FinishStop
}

// translation is one try's answer translation.
type translation struct {
	id      string
	model   string
	created int64
}

// Answer translates a whole Converse answer.
func (t *translation) Answer(body []byte) ([]byte, upstream.Usage, error) {
	var r converseResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, upstream.Usage{}, errors.New("the BEDROCK answer is not a Converse answer: " + err.Error())
	}
	u := r.Usage.usage()
	msg := openai.AssistantMessage{Role: "assistant"}
	if m := r.Output.Message; m != nil {
		var text strings.Builder
		hasText := false
		for _, b := range m.Content {
			switch {
			case b.Text != nil:
				text.WriteString(*b.Text)
				hasText = true
			case b.ToolUse != nil:
				msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: b.ToolUse.ToolUseID, Type: "function",
					Function: openai.FunctionCall{Name: b.ToolUse.Name, Arguments: openai.Arguments(b.ToolUse.Input)}})
			}
		}
		if hasText {
			s := text.String()
			msg.Content = &s
		}
	}
	out, err := json.Marshal(openai.ChatCompletion{ID: t.id, Object: openai.ObjectCompletion, Created: t.created, Model: t.model,
		Choices: []openai.ChatChoice{{Message: msg, FinishReason: finishReason(r.StopReason)}}, Usage: openai.UsageOf(u)})
	return out, u, err
}

// bedrockError is the body of Bedrock's error answers: {"message": ...}; the error's kind is in the
// x-amzn-ErrorType header.
type bedrockError struct {
	Message      string `json:"message"`
	MessageUpper string `json:"Message"`
}

// canonicalEcho starts the part of an AWS signature error that echoes the canonical request, whose headers include
// the session token: it is cut off, so a credential never reaches the client.
const canonicalEcho = "The Canonical String for this request should have been"

// Error translates Bedrock's error answer into OpenAI's envelope, with its message, short of any echo of the
// signed request.
func (t *translation) Error(status int, body []byte) []byte {
	var e bedrockError
	_ = json.Unmarshal(body, &e)
	msg := e.Message
	if msg == "" {
		msg = e.MessageUpper
	}
	if i := strings.Index(msg, canonicalEcho); i >= 0 {
		msg = strings.TrimSpace(msg[:i])
	}
	if msg == "" {
		msg = fmt.Sprintf("The BEDROCK upstream answered %d.", status)
	}
	return upstream.ErrorEnvelope(msg, openai.ErrorType(status), strconv.Itoa(status))
}

// The events of a ConverseStream answer
// (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html).
type streamEvent struct {
	ContentBlockIndex int `json:"contentBlockIndex"`
	Start             *struct {
		ToolUse *struct {
			ToolUseID string `json:"toolUseId"`
			Name      string `json:"name"`
		} `json:"toolUse"`
	} `json:"start"`
	Delta *struct {
		Text    *string `json:"text"`
		ToolUse *struct {
			Input string `json:"input"`
		} `json:"toolUse"`
	} `json:"delta"`
	StopReason string      `json:"stopReason"`
	Usage      *tokenUsage `json:"usage"`
	Message    string      `json:"message"`
}

// Stream translates ConverseStream's AWS event stream, decoded message by message with aws-sdk-go-v2's eventstream
// decoder, into OpenAI chunks as each event arrives: messageStart opens the answer, a contentBlockStart of a tool
// use opens a tool call, contentBlockDelta carries text or a tool call's arguments, messageStop the finish reason,
// metadata the usage. An exception event ends the stream with an error chunk.
func (t *translation) Stream(r io.Reader, emit func([]byte) error, clientWantsUsage bool) (upstream.Usage, error) {
	dec := eventstream.NewDecoder()
	br := openai.StreamReader(r)
	defer openai.ReleaseStreamReader(br)
	var payload []byte
	s := streamState{w: openai.ChunkWriter{ID: t.id, Created: t.created, Model: t.model, Emit: emit}, tools: map[int]int{}}
	for {
		msg, err := dec.Decode(br, payload[:0])
		if err != nil {
			if errors.Is(err, io.EOF) && s.finished {
				break
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return s.usage, err
		}
		payload = msg.Payload
		if err := s.message(msg); err != nil {
			return s.usage, err
		}
	}
	if clientWantsUsage {
		if err := s.w.Usage(openai.UsageOf(s.usage)); err != nil {
			return s.usage, err
		}
	}
	return s.usage, nil
}

// streamState is what a stream's translation keeps between events.
type streamState struct {
	w     openai.ChunkWriter
	usage upstream.Usage
	// tools numbers the tool calls by their content block.
	tools    map[int]int
	opened   bool
	stopped  bool
	finished bool
}

func header(msg eventstream.Message, name string) string {
	if v := msg.Headers.Get(name); v != nil {
		return v.String()
	}
	return ""
}

// message translates one event-stream message.
func (s *streamState) message(msg eventstream.Message) error {
	switch header(msg, ":message-type") {
	case "event":
	case "exception":
		return s.fail(header(msg, ":exception-type"), msg.Payload)
	case "error":
		return s.fail(header(msg, ":error-code"), []byte(strconv.Quote(header(msg, ":error-message"))))
	default:
		return nil
	}
	var ev streamEvent
	if err := json.Unmarshal(msg.Payload, &ev); err != nil {
		return fmt.Errorf("the BEDROCK stream sent an unreadable %s event: %w", header(msg, ":event-type"), err)
	}
	switch header(msg, ":event-type") {
	case "messageStart":
		if !s.opened {
			s.opened = true
			return s.w.Delta(openai.Delta{}, nil)
		}
	case "contentBlockStart":
		if ev.Start != nil && ev.Start.ToolUse != nil {
			n := len(s.tools)
			s.tools[ev.ContentBlockIndex] = n
			return s.w.Delta(openai.Delta{ToolCalls: []openai.ToolCall{{Index: &n, ID: ev.Start.ToolUse.ToolUseID, Type: "function",
				Function: openai.FunctionCall{Name: ev.Start.ToolUse.Name}}}}, nil)
		}
	case "contentBlockDelta":
		switch {
		case ev.Delta == nil:
		case ev.Delta.Text != nil:
			return s.w.Delta(openai.Delta{Content: ev.Delta.Text}, nil)
		case ev.Delta.ToolUse != nil:
			n, ok := s.tools[ev.ContentBlockIndex]
			if !ok {
				return fmt.Errorf("the BEDROCK stream sent tool input for content block %d, which started no tool use", ev.ContentBlockIndex)
			}
			return s.w.Delta(openai.Delta{ToolCalls: []openai.ToolCall{{Index: &n, Function: openai.FunctionCall{Arguments: ev.Delta.ToolUse.Input}}}}, nil)
		}
	case "messageStop":
		if !s.stopped {
			s.stopped = true
			reason := finishReason(ev.StopReason)
			return s.w.Delta(openai.Delta{}, &reason)
		}
	case "metadata":
		s.usage = ev.Usage.usage()
		s.finished = s.stopped
	}
	return nil
}

// fail sends the exception as an error chunk, which OpenAI's SDKs raise, and ends the stream with it.
func (s *streamState) fail(kind string, payload []byte) error {
	var e bedrockError
	if json.Unmarshal(payload, &e) != nil {
		_ = json.Unmarshal(payload, &e.Message)
	}
	msg := e.Message
	if msg == "" {
		msg = e.MessageUpper
	}
	if err := s.w.Emit(upstream.ErrorEnvelope(msg, "api_error", kind)); err != nil {
		return err
	}
	return fmt.Errorf("the BEDROCK stream ended with %s: %s", kind, msg)
}
