package gemini

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	json "github.com/go-json-experiment/json"

	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// generateResponse is a generateContent answer, and each event of a streamed one
// (https://ai.google.dev/api/generate-content#generatecontentresponse).
type generateResponse struct {
	Candidates     []candidate     `json:"candidates"`
	PromptFeedback *promptFeedback `json:"promptFeedback"`
	UsageMetadata  *usageMetadata  `json:"usageMetadata"`
	ModelVersion   string          `json:"modelVersion"`
	// Error ends a stream that failed after it began.
	Error *errorBody `json:"error"`
}

type candidate struct {
	Content      content `json:"content"`
	FinishReason string  `json:"finishReason"`
}

type promptFeedback struct {
	BlockReason string `json:"blockReason"`
}

type usageMetadata struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	TotalTokenCount         int64 `json:"totalTokenCount"`
}

// usage is what a call is charged: the prompt (cached tokens are part of promptTokenCount) and tool-use prompt as
// input, the candidates and the thinking as output, which Gemini bills as output. A negative count is read as 0.
func (m *usageMetadata) usage() upstream.Usage {
	if m == nil {
		return upstream.Usage{}
	}
	u := upstream.Usage{PromptTokens: max(m.PromptTokenCount, 0) + max(m.ToolUsePromptTokenCount, 0),
		CompletionTokens: max(m.CandidatesTokenCount, 0) + max(m.ThoughtsTokenCount, 0)}
	u.TotalTokens = max(m.TotalTokenCount, u.PromptTokens+u.CompletionTokens)
	return u
}

// finishReason maps Gemini's finishReason onto OpenAI's; a function call ends a turn as tool_calls.
func finishReason(reason string, calledTools bool) string {
	switch reason {
	case "MAX_TOKENS":
		return openai.FinishLength
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT":
		return openai.FinishContentFilter
	}
	if calledTools {
		return openai.FinishToolCalls
	}
	return openai.FinishStop
}

// translation is one try's answer translation. id names the answer and, numbered, the tool calls Gemini gave no id.
type translation struct {
	id      string
	model   string
	created int64
	// embed: the try is an embeddings call, answered by batchEmbedContents.
	embed bool
	// base64: the client asked for embeddings as base64 (encoding_format).
	base64 bool
}

func (t *translation) toolCallID(fc *functionCall, n int) string {
	if fc.ID != "" {
		return fc.ID
	}
	return "call_" + t.id[len("chatcmpl-"):] + "_" + strconv.Itoa(n)
}

// Answer translates a whole generateContent (or batchEmbedContents) answer.
func (t *translation) Answer(body []byte) ([]byte, upstream.Usage, error) {
	if t.embed {
		return t.embeddings(body)
	}
	var r generateResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, upstream.Usage{}, errors.New("the GEMINI answer is not a generateContent answer: " + err.Error())
	}
	u := r.UsageMetadata.usage()
	msg := openai.AssistantMessage{Role: "assistant"}
	reason := openai.FinishStop
	if len(r.Candidates) > 0 {
		c := &r.Candidates[0]
		var text strings.Builder
		hasText := false
		for i := range c.Content.Parts {
			p := &c.Content.Parts[i]
			switch {
			case p.Thought:
			case p.Text != nil:
				text.WriteString(*p.Text)
				hasText = true
			case p.FunctionCall != nil:
				msg.ToolCalls = append(msg.ToolCalls, t.toolCall(p.FunctionCall, len(msg.ToolCalls), false))
			}
		}
		if hasText {
			s := text.String()
			msg.Content = &s
		}
		reason = finishReason(c.FinishReason, len(msg.ToolCalls) > 0)
	} else if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" {
		reason = openai.FinishContentFilter
	}
	out, err := json.Marshal(openai.ChatCompletion{ID: t.id, Object: openai.ObjectCompletion, Created: t.created, Model: t.modelOf(&r),
		Choices: []openai.ChatChoice{{Message: msg, FinishReason: reason}}, Usage: openai.UsageOf(u)})
	return out, u, err
}

func (t *translation) modelOf(r *generateResponse) string {
	if r.ModelVersion != "" {
		return r.ModelVersion
	}
	return t.model
}

// toolCall is a function call as an OpenAI tool call; in a chunk it carries its index.
func (t *translation) toolCall(fc *functionCall, n int, indexed bool) openai.ToolCall {
	c := openai.ToolCall{ID: t.toolCallID(fc, n), Type: "function", Function: openai.FunctionCall{Name: fc.Name, Arguments: openai.Arguments(fc.Args)}}
	if indexed {
		c.Index = &n
	}
	return c
}

// geminiError is Gemini's error answer (https://ai.google.dev/gemini-api/docs/troubleshooting), sometimes in a list.
type geminiError struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
}

// Error translates Gemini's error answer into OpenAI's envelope: its message and status are passed on. The key
// travels in a header, which Gemini does not echo.
func (t *translation) Error(status int, body []byte) []byte {
	var e geminiError
	b := bytes.TrimSpace(body)
	if len(b) > 0 && b[0] == '[' {
		var list []geminiError
		if json.Unmarshal(b, &list) == nil && len(list) > 0 {
			e = list[0]
		}
	} else {
		_ = json.Unmarshal(b, &e)
	}
	msg := e.Error.Message
	if msg == "" {
		msg = fmt.Sprintf("The GEMINI upstream answered %d.", status)
	}
	return upstream.ErrorEnvelope(msg, openai.ErrorType(status), e.Error.Status)
}

// Stream translates Gemini's SSE stream (streamGenerateContent?alt=sse: each event a generateContent answer
// with the next text) into OpenAI chunks, one per event as it arrives; Forward frames them and ends the stream.
// usageMetadata counts up over the events: the last one read is the call's usage.
func (t *translation) Stream(r io.Reader, emit func([]byte) error, clientWantsUsage bool) (upstream.Usage, error) {
	s := streamState{t: t, w: openai.ChunkWriter{ID: t.id, Created: t.created, Model: t.model, Emit: emit}}
	err := eachEvent(r, s.event)
	if err != nil {
		return s.usage, err
	}
	if !s.finished {
		return s.usage, io.ErrUnexpectedEOF
	}
	if clientWantsUsage {
		if err := s.w.Usage(openai.UsageOf(s.usage)); err != nil {
			return s.usage, err
		}
	}
	return s.usage, nil
}

// eachEvent calls fn with the data of each server-sent event read from r (upstream.EventData), as it completes.
func eachEvent(r io.Reader, fn func(data []byte) error) error {
	br := openai.StreamReader(r)
	defer openai.ReleaseStreamReader(br)
	var event []byte
	partial := false
	for {
		line, err := br.ReadSlice('\n')
		event = append(event, line...)
		if errors.Is(err, bufio.ErrBufferFull) {
			partial = true
			continue
		}
		if end := !partial && len(bytes.TrimRight(line, "\r\n")) == 0; end || err != nil {
			if data := upstream.EventData(event); len(data) > 0 {
				if ferr := fn(data); ferr != nil {
					return ferr
				}
			}
			event = event[:0]
		}
		partial = false
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// streamState is what a stream's translation keeps between events.
type streamState struct {
	t        *translation
	w        openai.ChunkWriter
	usage    upstream.Usage
	tools    int
	finished bool
}

// event translates one event: its text as one chunk, its function calls as one, its finish reason as the last.
func (s *streamState) event(data []byte) error {
	var r generateResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return errors.New("the GEMINI stream sent an event that is not a generateContent answer: " + err.Error())
	}
	if e := r.Error; e != nil {
		// Sent as OpenAI's error chunk, which OpenAI's SDKs raise; the stream then ends without [DONE].
		if err := s.w.Emit(upstream.ErrorEnvelope(e.Message, openai.ErrorType(e.Code), e.Status)); err != nil {
			return err
		}
		return fmt.Errorf("the GEMINI stream ended with %s: %s", e.Status, e.Message)
	}
	if r.ModelVersion != "" {
		s.w.Model = r.ModelVersion
	}
	if r.UsageMetadata != nil {
		s.usage = r.UsageMetadata.usage()
	}
	if len(r.Candidates) == 0 {
		if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" && !s.finished {
			s.finished = true
			reason := openai.FinishContentFilter
			return s.w.Delta(openai.Delta{}, &reason)
		}
		return nil
	}
	c := &r.Candidates[0]
	var text []byte
	hasText := false
	var calls []openai.ToolCall
	for i := range c.Content.Parts {
		p := &c.Content.Parts[i]
		switch {
		case p.Thought:
		case p.Text != nil:
			text = append(text, *p.Text...)
			hasText = true
		case p.FunctionCall != nil:
			calls = append(calls, s.t.toolCall(p.FunctionCall, s.tools, true))
			s.tools++
		}
	}
	if hasText {
		str := string(text)
		if err := s.w.Delta(openai.Delta{Content: &str}, nil); err != nil {
			return err
		}
	}
	if len(calls) > 0 {
		if err := s.w.Delta(openai.Delta{ToolCalls: calls}, nil); err != nil {
			return err
		}
	}
	if c.FinishReason != "" && !s.finished {
		s.finished = true
		reason := finishReason(c.FinishReason, s.tools > 0)
		return s.w.Delta(openai.Delta{}, &reason)
	}
	return nil
}
