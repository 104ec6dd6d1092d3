// Package messages is the client API of Anthropic's Messages (POST /v1/messages, docs/rest-api.md "Messages"):
// Request translates a client's Messages request into the OpenAI chat body every provider takes, and Writer
// rewrites the OpenAI answer of that call (whole, streamed, or an error) into Messages' answer, events and error
// shape as it is written. gatewayd/inference serves the route through the same call path as /v1/chat/completions.
package messages

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelgate/modelgate/gatewayd/provider/anthropic"
)

// Refused is a member of a Messages request that an OpenAI chat body cannot express: the client's 400 names it.
type Refused struct{ Field, Reason string }

func (e *Refused) Error() string {
	if e.Reason == "" {
		return e.Field + ": not supported on /v1/messages by this gateway"
	}
	return e.Field + ": " + e.Reason
}

func refuse(field, reason string) error { return &Refused{Field: field, Reason: reason} }

// chatRequest is the OpenAI chat body of a Messages request.
type chatRequest struct {
	Model             string          `json:"model"`
	Messages          []chatMessage   `json:"messages"`
	MaxTokens         int64           `json:"max_tokens,omitempty"`
	Temperature       *float64        `json:"temperature,omitempty"`
	TopP              *float64        `json:"top_p,omitempty"`
	Stop              []string        `json:"stop,omitempty"`
	Stream            bool            `json:"stream,omitempty"`
	StreamOptions     *streamOptions  `json:"stream_options,omitempty"`
	Tools             []chatTool      `json:"tools,omitempty"`
	ToolChoice        json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls,omitempty"`
	User              string          `json:"user,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []chatToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type chatPart struct {
	Type     string     `json:"type"`
	Text     string     `json:"text,omitempty"`
	ImageURL *chatImage `json:"image_url,omitempty"`
}

type chatImage struct {
	URL string `json:"url"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string           `json:"type"`
	Function chatToolFunction `json:"function"`
}

type chatToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// requestMembers are the members of a Messages request that translate.
var requestMembers = []string{"model", "max_tokens", "messages", "system", "temperature", "top_p", "stop_sequences",
	"stream", "tools", "tool_choice", "metadata"}

// Request translates a Messages request into an OpenAI chat body; stream says whether the client asked for
// events. A streamed call asks for the usage chunk, which the Writer turns into message_delta's usage.
func Request(body []byte) (chat []byte, stream bool, err error) {
	m, err := anthropic.Object(body, "", refuse, requestMembers...)
	if err != nil {
		return nil, false, err
	}
	var req chatRequest
	var system, toolChoice json.RawMessage
	var messages []json.RawMessage
	var tools []json.RawMessage
	var metadata map[string]json.RawMessage
	for _, d := range []struct {
		name string
		v    any
	}{{"model", &req.Model}, {"max_tokens", &req.MaxTokens}, {"messages", &messages}, {"system", &system},
		{"temperature", &req.Temperature}, {"top_p", &req.TopP}, {"stop_sequences", &req.Stop}, {"stream", &req.Stream},
		{"tools", &tools}, {"tool_choice", &toolChoice}, {"metadata", &metadata}} {
		if err := anthropic.Decode(m, "", d.name, d.v, refuse); err != nil {
			return nil, false, err
		}
	}
	if req.Model == "" {
		return nil, false, refuse("model", "is required")
	}
	if req.MaxTokens <= 0 {
		return nil, false, refuse("max_tokens", "is required and must be positive")
	}
	if req.Stream {
		req.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	for k, v := range metadata {
		if k != "user_id" {
			return nil, false, refuse("metadata."+k, "")
		}
		_ = json.Unmarshal(v, &req.User)
	}
	if len(system) > 0 && string(system) != "null" {
		text, err := texts(system, "system")
		if err != nil {
			return nil, false, err
		}
		req.Messages = append(req.Messages, chatMessage{Role: "system", Content: text})
	}
	if len(messages) == 0 {
		return nil, false, refuse("messages", "is required: at least one message")
	}
	for i, raw := range messages {
		if err := req.addMessage(raw, fmt.Sprintf("messages[%d].", i)); err != nil {
			return nil, false, err
		}
	}
	if err := req.addTools(tools, toolChoice); err != nil {
		return nil, false, err
	}
	chat, err = json.Marshal(&req)
	return chat, req.Stream, err
}

// texts is a content of text alone (a string or text blocks) as OpenAI's content: a string, or text parts.
func texts(raw json.RawMessage, path string) (json.RawMessage, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return raw, nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, refuse(path, "must be a string or a list of text blocks")
	}
	parts := make([]chatPart, 0, len(blocks))
	for i, b := range blocks {
		text, err := textBlock(b, fmt.Sprintf("%s[%d].", path, i))
		if err != nil {
			return nil, err
		}
		parts = append(parts, chatPart{Type: "text", Text: text})
	}
	return json.Marshal(parts)
}

// textBlock is the text of a text block.
func textBlock(raw json.RawMessage, path string) (string, error) {
	m, err := anthropic.Object(raw, path, refuse, "type", "text")
	if err != nil {
		return "", err
	}
	var typ, text string
	_ = anthropic.Decode(m, path, "type", &typ, refuse)
	if typ != "text" {
		return "", refuse(path+"type", "must be text here")
	}
	if err := anthropic.Decode(m, path, "text", &text, refuse); err != nil {
		return "", err
	}
	return text, nil
}

// addMessage adds one Messages turn: a user turn's tool_result blocks become tool messages ahead of the rest of
// the turn; an assistant turn's tool_use blocks become its tool calls.
func (req *chatRequest) addMessage(raw json.RawMessage, path string) error {
	m, err := anthropic.Object(raw, path, refuse, "role", "content")
	if err != nil {
		return err
	}
	var role string
	_ = anthropic.Decode(m, path, "role", &role, refuse)
	if role != "user" && role != "assistant" {
		return refuse(path+"role", "must be user or assistant")
	}
	content := m["content"]
	var s string
	if json.Unmarshal(content, &s) == nil {
		req.Messages = append(req.Messages, chatMessage{Role: role, Content: content})
		return nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(content, &blocks); err != nil || len(blocks) == 0 {
		return refuse(path+"content", "must be a string or a non-empty list of content blocks")
	}
	msg := chatMessage{Role: role}
	var parts []chatPart
	var assistantText strings.Builder
	for i, raw := range blocks {
		p := fmt.Sprintf("%scontent[%d].", path, i)
		var head struct{ Type string }
		_ = json.Unmarshal(raw, &head)
		switch {
		case head.Type == "text":
			text, err := textBlock(raw, p)
			if err != nil {
				return err
			}
			parts = append(parts, chatPart{Type: "text", Text: text})
			assistantText.WriteString(text)
		case head.Type == "image" && role == "user":
			part, err := image(raw, p)
			if err != nil {
				return err
			}
			parts = append(parts, part)
		case head.Type == "tool_result" && role == "user":
			tm, err := anthropic.Object(raw, p, refuse, "type", "tool_use_id", "content", "is_error")
			if err != nil {
				return err
			}
			var id string
			var isError bool
			_ = anthropic.Decode(tm, p, "tool_use_id", &id, refuse)
			if err := anthropic.Decode(tm, p, "is_error", &isError, refuse); err != nil {
				return err
			}
			if isError {
				return refuse(p+"is_error", "an OpenAI tool message cannot mark an error")
			}
			result := json.RawMessage(`""`)
			if c := tm["content"]; len(c) > 0 {
				if result, err = texts(c, p+"content"); err != nil {
					return err
				}
			}
			req.Messages = append(req.Messages, chatMessage{Role: "tool", ToolCallID: id, Content: result})
		case head.Type == "tool_use" && role == "assistant":
			tm, err := anthropic.Object(raw, p, refuse, "type", "id", "name", "input")
			if err != nil {
				return err
			}
			var call chatToolCall
			_ = anthropic.Decode(tm, p, "id", &call.ID, refuse)
			_ = anthropic.Decode(tm, p, "name", &call.Function.Name, refuse)
			call.Type, call.Function.Arguments = "function", string(tm["input"])
			if call.Function.Arguments == "" {
				call.Function.Arguments = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		default:
			return refuse(p+"type", fmt.Sprintf("a %s block cannot be sent in a %s turn by this gateway", head.Type, role))
		}
	}
	switch {
	case role == "assistant" && len(parts) > 0:
		msg.Content, _ = json.Marshal(assistantText.String())
	case role == "user" && len(parts) > 0:
		msg.Content, _ = json.Marshal(parts)
	case role == "user":
		return nil // a turn of tool results only
	}
	req.Messages = append(req.Messages, msg)
	return nil
}

// image is the OpenAI image_url part of an image block: base64 data as a data URL, a URL as is.
func image(raw json.RawMessage, path string) (chatPart, error) {
	m, err := anthropic.Object(raw, path, refuse, "type", "source")
	if err != nil {
		return chatPart{}, err
	}
	var src anthropic.ImageSource
	if err := anthropic.Decode(m, path, "source", &src, refuse); err != nil {
		return chatPart{}, err
	}
	switch src.Type {
	case "base64":
		return chatPart{Type: "image_url", ImageURL: &chatImage{URL: "data:" + src.MediaType + ";base64," + src.Data}}, nil
	case "url":
		return chatPart{Type: "image_url", ImageURL: &chatImage{URL: src.URL}}, nil
	}
	return chatPart{}, refuse(path+"source.type", "must be base64 or url")
}

// addTools translates tools and tool_choice.
func (req *chatRequest) addTools(tools []json.RawMessage, choice json.RawMessage) error {
	for i, raw := range tools {
		p := fmt.Sprintf("tools[%d].", i)
		m, err := anthropic.Object(raw, p, refuse, "name", "description", "input_schema", "type")
		if err != nil {
			return err
		}
		var typ string
		_ = anthropic.Decode(m, p, "type", &typ, refuse)
		if typ != "" && typ != "custom" {
			return refuse(p+"type", "only client tools (custom) translate to OpenAI functions")
		}
		t := chatTool{Type: "function"}
		if err := anthropic.Decode(m, p, "name", &t.Function.Name, refuse); err != nil {
			return err
		}
		if err := anthropic.Decode(m, p, "description", &t.Function.Description, refuse); err != nil {
			return err
		}
		t.Function.Parameters = m["input_schema"]
		req.Tools = append(req.Tools, t)
	}
	if len(choice) == 0 || string(choice) == "null" {
		return nil
	}
	m, err := anthropic.Object(choice, "tool_choice.", refuse, "type", "name", "disable_parallel_tool_use")
	if err != nil {
		return err
	}
	var c anthropic.ToolChoice
	_ = anthropic.Decode(m, "tool_choice.", "type", &c.Type, refuse)
	_ = anthropic.Decode(m, "tool_choice.", "name", &c.Name, refuse)
	if err := anthropic.Decode(m, "tool_choice.", "disable_parallel_tool_use", &c.DisableParallelToolUse, refuse); err != nil {
		return err
	}
	switch c.Type {
	case "auto", "none":
		req.ToolChoice, _ = json.Marshal(c.Type)
	case "any":
		req.ToolChoice = json.RawMessage(`"required"`)
	case "tool":
		req.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": c.Name}})
	default:
		return refuse("tool_choice.type", "must be auto, any, tool or none")
	}
	if c.DisableParallelToolUse {
		f := false
		req.ParallelToolCalls = &f
	}
	return nil
}
