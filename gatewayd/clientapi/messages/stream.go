package messages

import (
	"encoding/json"
)

// streamState rewrites OpenAI's chunks into Messages' events: message_start before the first, a content block
// per run of text and per tool call, and at [DONE] the message_delta with the stop reason and the usage (which
// the call asked for with stream_options.include_usage), then message_stop.
type streamState struct {
	started bool
	// block is the index of the open content block, -1 when none; next is the index of the next one.
	block, next int
	// blockType is the open block's type.
	blockType string
	// tools maps an OpenAI tool call index to its content block.
	tools      map[int]int
	stopReason string
	usage      messageUsage
	done       bool
}

// Done reports whether the stream reached its end ([DONE]) and message_stop was written.
func (m *Writer) Done() bool { return m.s.done }

func event(out []byte, name string, v any) []byte {
	b, _ := json.Marshal(v)
	out = append(out, "event: "...)
	out = append(out, name...)
	out = append(out, "\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

// chunk rewrites the data of one OpenAI event into Messages' events.
func (s *streamState) chunk(data []byte) []byte {
	var out []byte
	if string(data) == "[DONE]" {
		if s.done {
			return nil
		}
		out = s.start(out, "", "")
		out = s.close(out)
		stop := s.stopReason
		if stop == "" {
			stop = "end_turn"
		}
		out = event(out, "message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": s.usage})
		s.done = true
		return event(out, "message_stop", map[string]string{"type": "message_stop"})
	}
	var c chatAnswer
	if json.Unmarshal(data, &c) != nil {
		return nil
	}
	if len(c.Error) > 0 {
		var e struct{ Message string }
		_ = json.Unmarshal(c.Error, &e)
		return event(out, "error", map[string]any{"type": "error", "error": map[string]string{"type": "api_error", "message": e.Message}})
	}
	out = s.start(out, c.ID, c.Model)
	if c.Usage != nil {
		s.usage = messageUsage{InputTokens: max(c.Usage.PromptTokens, 0), OutputTokens: max(c.Usage.CompletionTokens, 0)}
	}
	for _, ch := range c.Choices {
		if d := ch.Delta; d != nil {
			if d.Content != nil && *d.Content != "" {
				if s.blockType != "text" {
					out = s.close(out)
					out = s.open(out, contentBlock{Type: "text", Text: new(string)})
				}
				out = event(out, "content_block_delta", map[string]any{"type": "content_block_delta", "index": s.block,
					"delta": map[string]string{"type": "text_delta", "text": *d.Content}})
			}
			for _, tc := range d.ToolCalls {
				i, known := s.tools[tc.Index]
				if !known {
					out = s.close(out)
					out = s.open(out, contentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: json.RawMessage("{}")})
					if s.tools == nil {
						s.tools = map[int]int{}
					}
					i = s.block
					s.tools[tc.Index] = i
				}
				if tc.Function.Arguments != "" {
					out = event(out, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
						"delta": map[string]string{"type": "input_json_delta", "partial_json": tc.Function.Arguments}})
				}
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			out = s.close(out)
			s.stopReason = StopReason(*ch.FinishReason)
		}
	}
	return out
}

// start writes message_start once.
func (s *streamState) start(out []byte, id, model string) []byte {
	if s.started {
		return out
	}
	s.started, s.block = true, -1
	return event(out, "message_start", map[string]any{"type": "message_start", "message": message{ID: id, Type: "message",
		Role: "assistant", Model: model, Content: []contentBlock{}}})
}

// open starts content block b.
func (s *streamState) open(out []byte, b contentBlock) []byte {
	s.block, s.blockType = s.next, b.Type
	s.next++
	return event(out, "content_block_start", map[string]any{"type": "content_block_start", "index": s.block, "content_block": b})
}

// close ends the open content block, if any.
func (s *streamState) close(out []byte) []byte {
	if s.block < 0 || s.blockType == "" {
		return out
	}
	out = event(out, "content_block_stop", map[string]any{"type": "content_block_stop", "index": s.block})
	s.blockType = ""
	return out
}
