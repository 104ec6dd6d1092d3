package openai

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/provider"
)

// The chat-completions shapes a translating provider (one whose upstream speaks another wire) reads a client's
// body into and writes its answer from. OpenAI's chat-completions shape is gatewayd's one internal form of a model
// call (docs/routing.md "Providers"): a translating provider maps this request to its own and its answer back.

// ChatRequest is an OpenAI chat-completions body, every member a translating provider can map. A member it does
// not know is refused by ParseChat, never dropped; a member it knows but a provider cannot take is refused by
// that provider (FieldError).
type ChatRequest struct {
	Model               string             `json:"model"`
	Messages            []ChatMessage      `json:"messages"`
	MaxTokens           *int64             `json:"max_tokens"`
	MaxCompletionTokens *int64             `json:"max_completion_tokens"`
	Temperature         *float64           `json:"temperature"`
	TopP                *float64           `json:"top_p"`
	Stop                Strings            `json:"stop"`
	Tools               []ChatTool         `json:"tools"`
	ToolChoice          *ToolChoice        `json:"tool_choice"`
	Stream              bool               `json:"stream"`
	StreamOptions       *ChatStreamOptions `json:"stream_options"`
	N                   *int64             `json:"n"`
	PresencePenalty     *float64           `json:"presence_penalty"`
	FrequencyPenalty    *float64           `json:"frequency_penalty"`
	Seed                *int64             `json:"seed"`
}

// ChatStreamOptions is stream_options: include_usage asks for the stream's usage chunk.
type ChatStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// MaxOutput is the client's bound on the answer's tokens: max_completion_tokens, or the older max_tokens.
func (r *ChatRequest) MaxOutput() *int64 {
	if r.MaxCompletionTokens != nil {
		return r.MaxCompletionTokens
	}
	return r.MaxTokens
}

// ChatMessage is one message of a chat body: system, developer, user, assistant or tool.
type ChatMessage struct {
	Role       string     `json:"role"`
	Content    Content    `json:"content"`
	Name       string     `json:"name"`
	ToolCalls  []ToolCall `json:"tool_calls"`
	ToolCallID string     `json:"tool_call_id"`
}

// Content is a message's content: a string, or a list of text and image parts.
type Content struct {
	Text  string
	Parts []ContentPart
}

// UnmarshalJSONFrom reads a string, null or a list of parts.
func (c *Content) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	switch dec.PeekKind() {
	case '"':
		return json.UnmarshalDecode(dec, &c.Text)
	case 'n':
		_, err := dec.ReadToken()
		return err
	case '[':
		return json.UnmarshalDecode(dec, &c.Parts, json.RejectUnknownMembers(true))
	}
	return errors.New("content must be a string or a list of parts")
}

// ContentPart is one part of a message's content.
type ContentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text"`
	ImageURL *ImageURL `json:"image_url"`
}

// ImageURL is an image part's image; gatewayd passes on only data URLs.
type ImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail"`
}

// DataURL splits a base64 data URL (data:image/png;base64,...) into its media type and its base64 data, checked.
func DataURL(u string) (mediaType, data string, err error) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", "", errors.New("only data URLs (data:<media type>;base64,<data>) are taken")
	}
	meta, data, ok := strings.Cut(rest, ",")
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isBase64 || mediaType == "" {
		return "", "", errors.New("a data URL must be data:<media type>;base64,<data>")
	}
	if _, err := base64.StdEncoding.DecodeString(data); err != nil {
		return "", "", errors.New("the data URL's data is not base64")
	}
	return mediaType, data, nil
}

// ToolCall is a tool call of an assistant message, or of an answer.
type ToolCall struct {
	// Index places a streamed tool call's pieces; only in chunks.
	Index    *int         `json:"index,omitzero"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function a tool call calls, its arguments a JSON object as a string.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ChatTool is a tool the model may call; only functions.
type ChatTool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function is a function a model may call.
type Function struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  jsontext.Value `json:"parameters"`
	Strict      *bool          `json:"strict"`
}

// ToolChoice is tool_choice: "none", "auto", "required", or one function by name.
type ToolChoice struct {
	Mode     string
	Function string
}

// UnmarshalJSONFrom reads the string or {"type":"function","function":{"name":...}}.
func (c *ToolChoice) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() == '"' {
		if err := json.UnmarshalDecode(dec, &c.Mode); err != nil {
			return err
		}
		switch c.Mode {
		case "none", "auto", "required":
			return nil
		}
		return fmt.Errorf("%q is not none, auto or required", c.Mode)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.UnmarshalDecode(dec, &named, json.RejectUnknownMembers(true)); err != nil {
		return err
	}
	if named.Type != "function" || named.Function.Name == "" {
		return errors.New(`an object tool_choice must be {"type":"function","function":{"name":...}}`)
	}
	c.Mode, c.Function = "function", named.Function.Name
	return nil
}

// Strings is stop: one string or a list of them.
type Strings []string

// UnmarshalJSONFrom reads a string, null or a list of strings.
func (s *Strings) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	switch dec.PeekKind() {
	case '"':
		var one string
		if err := json.UnmarshalDecode(dec, &one); err != nil {
			return err
		}
		*s = Strings{one}
		return nil
	case 'n':
		_, err := dec.ReadToken()
		return err
	}
	return json.UnmarshalDecode(dec, (*[]string)(s))
}

// ParseChat reads a chat-completions body for provider, refusing any member ChatRequest does not know (a
// *provider.Refused naming it) and any member of the wrong type.
func ParseChat(body []byte, kind string) (*ChatRequest, error) {
	r := &ChatRequest{}
	if err := json.Unmarshal(body, r, json.RejectUnknownMembers(true)); err != nil {
		return nil, BodyError(kind, err)
	}
	return r, nil
}

// BodyError turns a decoding error into a *provider.Refused naming the member.
func BodyError(kind string, err error) error {
	var se *json.SemanticError
	if !errors.As(err, &se) || se.JSONPointer == "" {
		return fmt.Errorf("the %s provider cannot read the body: %w", kind, err)
	}
	field := httperr.FieldPath(se.JSONPointer)
	if errors.Is(se.Err, json.ErrUnknownName) {
		return &provider.Refused{Provider: kind, Field: field}
	}
	msg := "has a value of the wrong type"
	if se.Err != nil {
		msg = "cannot take this value: " + se.Err.Error()
	}
	return &provider.Refused{Provider: kind, Field: field, Reason: msg}
}

// ChatCompletion is a whole chat-completions answer.
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   ChatUsage    `json:"usage"`
}

// ChatChoice is the one choice of a translated answer.
type ChatChoice struct {
	Index        int              `json:"index"`
	Message      AssistantMessage `json:"message"`
	FinishReason string           `json:"finish_reason"`
}

// AssistantMessage is an answer's message: text, tool calls, or both. Content is null when there is no text.
type AssistantMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ChatUsage is an answer's usage.
type ChatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// ChatChunk is one chunk of a streamed answer; the final usage chunk has no choices.
type ChatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []ChunkChoice `json:"choices"`
	Usage   *ChatUsage    `json:"usage,omitempty"`
}

// ChunkChoice is a chunk's choice: a piece of the answer, or its end (FinishReason).
type ChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// Delta is what a chunk adds to the answer. Content is left out only when nil: an empty text is sent, as OpenAI's
// first chunk sends it beside the role.
type Delta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitzero"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// The objects of the answers.
const (
	ObjectCompletion = "chat.completion"
	ObjectChunk      = "chat.completion.chunk"
)

// Finish reasons of a chat-completions answer.
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishToolCalls     = "tool_calls"
	FinishContentFilter = "content_filter"
)

// ErrorType is the type of OpenAI's error envelope that a client's SDK reads for an upstream's error status.
func ErrorType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 429:
		return "rate_limit_error"
	case status < 500:
		return "invalid_request_error"
	}
	return "api_error"
}
