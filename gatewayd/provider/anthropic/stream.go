package anthropic

import (
	"encoding/json"
	"errors"

	"github.com/modelgate/modelgate/gatewayd/provider/openai"
)

// streamEvent is one of Anthropic's server-sent events, as much as the translation reads.
type streamEvent struct {
	Type         string       `json:"type"`
	Index        int          `json:"index"`
	Message      *Answer      `json:"message"`
	ContentBlock *Block       `json:"content_block"`
	Delta        *streamDelta `json:"delta"`
	Usage        *usage       `json:"usage"`
	Error        *streamError `json:"error"`
}

type streamDelta struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	PartialJSON string `json:"partial_json"`
	StopReason  string `json:"stop_reason"`
}

type streamError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// StreamError is an error event in the middle of a stream: the answer ends there.
type StreamError struct{ Type, Message string }

func (e *StreamError) Error() string { return "upstream stream error " + e.Type + ": " + e.Message }

// streamer turns Anthropic's events into OpenAI chunks as they come.
type streamer struct {
	// out writes the chunks, with the id and model of message_start; emit writes an error event as it is.
	out   openai.ChunkWriter
	emit  func([]byte) error
	usage usage
	// toolIndex is the OpenAI tool call index of each tool_use content block.
	toolIndex map[int]int
	stopped   bool
}

// mergeUsage takes the counts an event reports; message_delta's are cumulative, and a count it leaves out
// (zero) keeps message_start's.
func (s *streamer) mergeUsage(u *usage) {
	if u == nil {
		return
	}
	for _, p := range []struct{ dst, src *int64 }{{&s.usage.InputTokens, &u.InputTokens}, {&s.usage.OutputTokens, &u.OutputTokens},
		{&s.usage.CacheCreationInputTokens, &u.CacheCreationInputTokens}, {&s.usage.CacheReadInputTokens, &u.CacheReadInputTokens}} {
		if *p.src > 0 {
			*p.dst = *p.src
		}
	}
}

func (s *streamer) event(data []byte) error {
	var e streamEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return err
	}
	switch e.Type {
	case "message_start":
		if e.Message != nil {
			s.out.ID, s.out.Model = e.Message.ID, e.Message.Model
			s.mergeUsage(&e.Message.Usage)
		}
		empty := ""
		return s.out.Delta(openai.Delta{Content: &empty}, nil)
	case "content_block_start":
		if b := e.ContentBlock; b != nil {
			switch b.Type {
			case "tool_use":
				i := len(s.toolIndex)
				s.toolIndex[e.Index] = i
				return s.out.Delta(openai.Delta{ToolCalls: []openai.ToolCall{{Index: &i, ID: b.ID, Type: "function", Function: openai.FunctionCall{Name: b.Name}}}}, nil)
			case "text":
				if b.Text != nil && *b.Text != "" {
					return s.out.Delta(openai.Delta{Content: b.Text}, nil)
				}
			}
		}
	case "content_block_delta":
		if d := e.Delta; d != nil {
			switch d.Type {
			case "text_delta":
				return s.out.Delta(openai.Delta{Content: &d.Text}, nil)
			case "input_json_delta":
				i, ok := s.toolIndex[e.Index]
				if !ok {
					return errors.New("an input_json_delta of a block that is no tool_use")
				}
				return s.out.Delta(openai.Delta{ToolCalls: []openai.ToolCall{{Index: &i, Function: openai.FunctionCall{Arguments: d.PartialJSON}}}}, nil)
			}
		}
	case "message_delta":
		s.mergeUsage(e.Usage)
		if e.Delta != nil && e.Delta.StopReason != "" {
			finish := FinishReason(e.Delta.StopReason)
			return s.out.Delta(openai.Delta{}, &finish)
		}
	case "message_stop":
		s.stopped = true
	case "error":
		se := &StreamError{Type: "error"}
		if e.Error != nil {
			se.Type, se.Message = e.Error.Type, e.Error.Message
		}
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": se.Message, "type": se.Type, "code": se.Type}})
		_ = s.emit(b)
		return se
	}
	return nil
}
