package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelgate/modelgate/gatewayd/provider"
)

// DefaultMaxTokens is the max_tokens of a Messages request whose client set neither max_tokens nor
// max_completion_tokens: Anthropic requires one, OpenAI's clients may leave it out (docs/decisions.md).
const DefaultMaxTokens = 4096

// Request is the Messages request gatewayd sends.
type Request struct {
	Model         string          `json:"model"`
	MaxTokens     int64           `json:"max_tokens"`
	System        json.RawMessage `json:"system,omitempty"`
	Messages      []Message       `json:"messages"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	Tools         []Tool          `json:"tools,omitempty"`
	ToolChoice    *ToolChoice     `json:"tool_choice,omitempty"`
	Metadata      *Metadata       `json:"metadata,omitempty"`
}

// Message is one turn of a Messages request.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
	// Plain: the content is one text block the client sent as a string, and is sent as one.
	Plain bool `json:"-"`
}

// MarshalJSON writes a plain message's content as a string.
func (m Message) MarshalJSON() ([]byte, error) {
	type message Message
	if m.Plain && len(m.Content) == 1 && m.Content[0].Text != nil {
		return json.Marshal(struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}{m.Role, *m.Content[0].Text})
	}
	return json.Marshal(message(m))
}

// Block is a content block of a Messages request or answer.
type Block struct {
	Type string `json:"type"`
	// Text of a text block.
	Text *string `json:"text,omitempty"`
	// Source of an image block.
	Source *ImageSource `json:"source,omitempty"`
	// ID, Name and Input of a tool_use block.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID and Content of a tool_result block.
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
}

// ImageSource is an image block's source: base64 data or a URL.
type ImageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// Tool is a tool the model may call.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// ToolChoice says whether and which tool the model must call.
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// Metadata of a Messages request.
type Metadata struct {
	UserID string `json:"user_id,omitempty"`
}

// TextBlock is a text content block.
func TextBlock(s string) Block { return Block{Type: "text", Text: &s} }

// refuse is the client's 400 naming field, which the ANTHROPIC provider cannot take.
func refuse(field, reason string) error {
	return &provider.Refused{Provider: Kind, Field: field, Reason: reason}
}

// Object reads the JSON object raw at path into its members, refusing one that allowed does not name.
func Object(raw json.RawMessage, path string, refuse func(field, reason string) error, allowed ...string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, refuse(strings.TrimSuffix(path, "."), "must be a JSON object")
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(allowed, k) {
			return nil, refuse(path+k, "")
		}
	}
	return m, nil
}

// Decode reads m[name] into v, a 400 naming path+name when it is not of v's type; a member absent or null leaves v
// as it is.
func Decode(m map[string]json.RawMessage, path, name string, v any, refuse func(field, reason string) error) error {
	raw, ok := m[name]
	if !ok || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return refuse(path+name, "has the wrong type: "+err.Error())
	}
	return nil
}

// requestMembers are the members of an OpenAI chat body the ANTHROPIC provider takes.
var requestMembers = []string{"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop",
	"stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls", "user", "n"}

// TranslateRequest is the Messages request of an OpenAI chat body, for targetModel (the body's model when
// empty). A member the Messages API cannot take is refused with a *provider.Refused naming it.
func TranslateRequest(body []byte, targetModel string) ([]byte, error) {
	m, err := Object(body, "", refuse, requestMembers...)
	if err != nil {
		return nil, err
	}
	var req Request
	var maxCompletion *int64
	var n *int64
	var stop json.RawMessage
	var parallel *bool
	var user string
	var streamOptions map[string]json.RawMessage
	for _, d := range []struct {
		name string
		v    any
	}{{"model", &req.Model}, {"max_tokens", &req.MaxTokens}, {"max_completion_tokens", &maxCompletion},
		{"temperature", &req.Temperature}, {"top_p", &req.TopP}, {"stop", &stop}, {"stream", &req.Stream},
		{"parallel_tool_calls", &parallel}, {"user", &user}, {"n", &n}, {"stream_options", &streamOptions}} {
		if err := Decode(m, "", d.name, d.v, refuse); err != nil {
			return nil, err
		}
	}
	if targetModel != "" {
		req.Model = targetModel
	}
	if n != nil && *n != 1 {
		return nil, refuse("n", "must be 1: the Messages API gives one answer per call")
	}
	for k := range streamOptions {
		if k != "include_usage" {
			return nil, refuse("stream_options."+k, "")
		}
	}
	if maxCompletion != nil {
		req.MaxTokens = *maxCompletion
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = DefaultMaxTokens
	}
	if req.MaxTokens < 0 {
		return nil, refuse("max_tokens", "must be positive")
	}
	if req.StopSequences, err = stopSequences(stop); err != nil {
		return nil, err
	}
	if user != "" {
		req.Metadata = &Metadata{UserID: user}
	}
	var messages []json.RawMessage
	if err := Decode(m, "", "messages", &messages, refuse); err != nil {
		return nil, err
	}
	if len(messages) == 0 {
		return nil, refuse("messages", "is required: at least one message")
	}
	var system []Block
	for i, raw := range messages {
		if system, err = req.addMessage(system, raw, fmt.Sprintf("messages[%d].", i)); err != nil {
			return nil, err
		}
	}
	if len(req.Messages) == 0 {
		return nil, refuse("messages", "needs a user or assistant message besides the system prompts")
	}
	if len(system) == 1 {
		req.System, _ = json.Marshal(*system[0].Text)
	} else if len(system) > 1 {
		req.System, _ = json.Marshal(system)
	}
	if err := req.addTools(m, parallel); err != nil {
		return nil, err
	}
	return json.Marshal(&req)
}

// stopSequences reads OpenAI's stop, a string or a list of them.
func stopSequences(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, refuse("stop", "must be a string or a list of strings")
	}
	return many, nil
}

// addMessage adds one OpenAI message: a system or developer message to system, a tool message as a tool_result
// (following tool results share one user turn), the others as a turn of their role.
func (req *Request) addMessage(system []Block, raw json.RawMessage, path string) ([]Block, error) {
	m, err := Object(raw, path, refuse, "role", "content", "tool_calls", "tool_call_id")
	if err != nil {
		return system, err
	}
	var role string
	if err := Decode(m, path, "role", &role, refuse); err != nil {
		return system, err
	}
	switch role {
	case "system", "developer":
		blocks, _, err := content(m["content"], path+"content", false)
		if err != nil {
			return system, err
		}
		return append(system, blocks...), nil
	case "user":
		blocks, plain, err := content(m["content"], path+"content", true)
		if err != nil {
			return system, err
		}
		req.Messages = append(req.Messages, Message{Role: "user", Content: blocks, Plain: plain})
	case "assistant":
		var blocks []Block
		plain := false
		if raw := m["content"]; len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
			if blocks, plain, err = content(raw, path+"content", false); err != nil {
				return system, err
			}
		}
		var calls []json.RawMessage
		if err := Decode(m, path, "tool_calls", &calls, refuse); err != nil {
			return system, err
		}
		for j, raw := range calls {
			b, err := toolUse(raw, fmt.Sprintf("%stool_calls[%d].", path, j))
			if err != nil {
				return system, err
			}
			blocks = append(blocks, b)
		}
		req.Messages = append(req.Messages, Message{Role: "assistant", Content: blocks, Plain: plain && len(calls) == 0})
	case "tool":
		var id string
		if err := Decode(m, path, "tool_call_id", &id, refuse); err != nil {
			return system, err
		}
		blocks, plain, err := content(m["content"], path+"content", false)
		if err != nil {
			return system, err
		}
		result, _ := json.Marshal(blocks)
		if plain {
			result, _ = json.Marshal(*blocks[0].Text)
		}
		b := Block{Type: "tool_result", ToolUseID: id, Content: result}
		if last := len(req.Messages) - 1; last >= 0 && req.Messages[last].Role == "user" && req.Messages[last].Content[0].Type == "tool_result" {
			req.Messages[last].Content = append(req.Messages[last].Content, b)
		} else {
			req.Messages = append(req.Messages, Message{Role: "user", Content: []Block{b}})
		}
	default:
		return system, refuse(path+"role", "must be system, developer, user, assistant or tool")
	}
	return system, nil
}

// content reads a message's content, a string or a list of parts, as blocks; images only when images. plain:
// the content was a string.
func content(raw json.RawMessage, path string, images bool) (blocks []Block, plain bool, err error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Block{TextBlock(s)}, true, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) == 0 {
		return nil, false, refuse(path, "must be a string or a non-empty list of content parts")
	}
	blocks = make([]Block, 0, len(parts))
	for i, raw := range parts {
		p := fmt.Sprintf("%s[%d].", path, i)
		m, err := Object(raw, p, refuse, "type", "text", "image_url")
		if err != nil {
			return nil, false, err
		}
		var typ string
		_ = Decode(m, p, "type", &typ, refuse)
		switch {
		case typ == "text":
			var text string
			if err := Decode(m, p, "text", &text, refuse); err != nil {
				return nil, false, err
			}
			blocks = append(blocks, TextBlock(text))
		case typ == "image_url" && images:
			b, err := image(m["image_url"], p+"image_url")
			if err != nil {
				return nil, false, err
			}
			blocks = append(blocks, b)
		default:
			return nil, false, refuse(p+"type", "must be text"+map[bool]string{true: " or image_url", false: " here"}[images])
		}
	}
	return blocks, false, nil
}

// image is the image block of an OpenAI image_url part: a data URL's bytes as base64 data, another URL as is.
func image(raw json.RawMessage, path string) (Block, error) {
	m, err := Object(raw, path+".", refuse, "url", "detail")
	if err != nil {
		return Block{}, err
	}
	var u string
	if err := Decode(m, path+".", "url", &u, refuse); err != nil {
		return Block{}, err
	}
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		mediaType, data, ok := strings.Cut(rest, ";base64,")
		if !ok || mediaType == "" {
			return Block{}, refuse(path+".url", "a data URL must be data:<media type>;base64,<data>")
		}
		return Block{Type: "image", Source: &ImageSource{Type: "base64", MediaType: mediaType, Data: data}}, nil
	}
	if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return Block{}, refuse(path+".url", "must be a data URL or an http(s) URL")
	}
	return Block{Type: "image", Source: &ImageSource{Type: "url", URL: u}}, nil
}

// toolUse is the tool_use block of an assistant's OpenAI tool call.
func toolUse(raw json.RawMessage, path string) (Block, error) {
	m, err := Object(raw, path, refuse, "id", "type", "function")
	if err != nil {
		return Block{}, err
	}
	var id, typ string
	var fn struct{ Name, Arguments string }
	for _, d := range []struct {
		name string
		v    any
	}{{"id", &id}, {"type", &typ}, {"function", &fn}} {
		if err := Decode(m, path, d.name, d.v, refuse); err != nil {
			return Block{}, err
		}
	}
	if typ != "" && typ != "function" {
		return Block{}, refuse(path+"type", "must be function")
	}
	input := json.RawMessage(fn.Arguments)
	if strings.TrimSpace(fn.Arguments) == "" {
		input = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(input, &obj) != nil || obj == nil {
		return Block{}, refuse(path+"function.arguments", "must be a JSON object")
	}
	return Block{Type: "tool_use", ID: id, Name: fn.Name, Input: input}, nil
}

// addTools reads OpenAI's tools and tool_choice; parallel_tool_calls false disables parallel tool use.
func (req *Request) addTools(m map[string]json.RawMessage, parallel *bool) error {
	var tools []json.RawMessage
	if err := Decode(m, "", "tools", &tools, refuse); err != nil {
		return err
	}
	for i, raw := range tools {
		p := fmt.Sprintf("tools[%d].", i)
		tm, err := Object(raw, p, refuse, "type", "function")
		if err != nil {
			return err
		}
		var typ string
		_ = Decode(tm, p, "type", &typ, refuse)
		if typ != "function" {
			return refuse(p+"type", "must be function")
		}
		fm, err := Object(tm["function"], p+"function.", refuse, "name", "description", "parameters")
		if err != nil {
			return err
		}
		var t Tool
		if err := Decode(fm, p+"function.", "name", &t.Name, refuse); err != nil {
			return err
		}
		if err := Decode(fm, p+"function.", "description", &t.Description, refuse); err != nil {
			return err
		}
		t.InputSchema = fm["parameters"]
		if len(t.InputSchema) == 0 {
			t.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		req.Tools = append(req.Tools, t)
	}
	raw, ok := m["tool_choice"]
	if ok && !bytes.Equal(raw, []byte("null")) {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			switch s {
			case "auto", "none":
				req.ToolChoice = &ToolChoice{Type: s}
			case "required":
				req.ToolChoice = &ToolChoice{Type: "any"}
			default:
				return refuse("tool_choice", "must be auto, none, required or a function")
			}
		} else {
			cm, err := Object(raw, "tool_choice.", refuse, "type", "function")
			if err != nil {
				return err
			}
			var fn struct{ Name string }
			if err := Decode(cm, "tool_choice.", "function", &fn, refuse); err != nil || fn.Name == "" {
				return refuse("tool_choice.function.name", "is required")
			}
			req.ToolChoice = &ToolChoice{Type: "tool", Name: fn.Name}
		}
	}
	if parallel != nil && !*parallel {
		if req.ToolChoice == nil {
			req.ToolChoice = &ToolChoice{Type: "auto"}
		}
		if req.ToolChoice.Type == "none" {
			return refuse("parallel_tool_calls", "cannot be false with tool_choice none")
		}
		req.ToolChoice.DisableParallelToolUse = true
	}
	return nil
}
