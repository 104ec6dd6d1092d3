package bedrock

import (
	"fmt"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
)

// The Converse request (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html), the
// members gatewayd writes. These structs stand in for bedrockruntime.ConverseInput, whose union types have no
// JSON form of their own; sdk_test.go holds them to the SDK by sending the same call with both.
type converseRequest struct {
	Messages        []message       `json:"messages"`
	System          []systemBlock   `json:"system,omitempty"`
	InferenceConfig inferenceConfig `json:"inferenceConfig,omitzero"`
	ToolConfig      *toolConfig     `json:"toolConfig,omitzero"`
}

type message struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

// block is a ContentBlock, one of its union members set.
type block struct {
	Text       *string     `json:"text,omitzero"`
	Image      *imageBlock `json:"image,omitzero"`
	ToolUse    *toolUse    `json:"toolUse,omitzero"`
	ToolResult *toolResult `json:"toolResult,omitzero"`
}

type imageBlock struct {
	Format string      `json:"format"`
	Source imageSource `json:"source"`
}

// imageSource carries the image's bytes, base64 in JSON as every AWS blob.
type imageSource struct {
	Bytes string `json:"bytes"`
}

type toolUse struct {
	ToolUseID string         `json:"toolUseId"`
	Name      string         `json:"name"`
	Input     jsontext.Value `json:"input"`
}

type toolResult struct {
	ToolUseID string              `json:"toolUseId"`
	Content   []toolResultContent `json:"content"`
}

type toolResultContent struct {
	Text string `json:"text"`
}

type systemBlock struct {
	Text string `json:"text"`
}

type inferenceConfig struct {
	MaxTokens     *int64   `json:"maxTokens,omitzero"`
	Temperature   *float64 `json:"temperature,omitzero"`
	TopP          *float64 `json:"topP,omitzero"`
	StopSequences []string `json:"stopSequences,omitzero"`
}

type toolConfig struct {
	Tools      []toolEntry `json:"tools"`
	ToolChoice *toolChoice `json:"toolChoice,omitzero"`
}

type toolEntry struct {
	ToolSpec toolSpec `json:"toolSpec"`
}

type toolSpec struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	InputSchema inputSchema `json:"inputSchema"`
}

type inputSchema struct {
	JSON jsontext.Value `json:"json"`
}

// toolChoice is one of auto, any and tool; an empty object selects the first two.
type toolChoice struct {
	Auto *struct{}  `json:"auto,omitzero"`
	Any  *struct{}  `json:"any,omitzero"`
	Tool *namedTool `json:"tool,omitzero"`
}

type namedTool struct {
	Name string `json:"name"`
}

// emptySchema is the input schema of a function that declares no parameters.
var emptySchema = jsontext.Value(`{"type":"object","properties":{}}`)

// imageFormats are the image media types Converse takes, by their format name.
var imageFormats = map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}

func refuse(field, reason string) error {
	return &provider.Refused{Provider: Kind, Field: field, Reason: reason}
}

// translateRequest is the Converse body of an OpenAI chat body.
func translateRequest(body []byte) ([]byte, error) {
	r, err := openai.ParseChat(body, Kind)
	if err != nil {
		return nil, err
	}
	req, err := fromChat(r)
	if err != nil {
		return nil, err
	}
	return json.Marshal(req)
}

// fromChat maps a chat request onto Converse: system and developer messages become system blocks, user and tool
// messages user turns (a tool message's answer a toolResult), assistant messages assistant turns with their
// toolUse blocks. Converse wants the roles to alternate, so consecutive messages of one role are one turn.
func fromChat(r *openai.ChatRequest) (*converseRequest, error) {
	switch {
	case r.N != nil && *r.N != 1:
		return nil, refuse("n", "answers one choice only; send n = 1 or leave it out")
	case r.PresencePenalty != nil:
		return nil, refuse("presence_penalty", "Converse has no presence penalty")
	case r.FrequencyPenalty != nil:
		return nil, refuse("frequency_penalty", "Converse has no frequency penalty")
	case r.Seed != nil:
		return nil, refuse("seed", "Converse has no seed")
	}
	req := &converseRequest{Messages: make([]message, 0, len(r.Messages))}
	for i, m := range r.Messages {
		at := fmt.Sprintf("messages[%d]", i)
		if m.Name != "" {
			return nil, refuse(at+".name", "Converse takes no participant name")
		}
		switch m.Role {
		case "system", "developer":
			text, err := m.Content.OnlyText(Kind, at)
			if err != nil {
				return nil, err
			}
			req.System = append(req.System, systemBlock{Text: text})
		case "user":
			blocks, err := userBlocks(at, m.Content)
			if err != nil {
				return nil, err
			}
			req.Messages = appendTurn(req.Messages, "user", blocks)
		case "assistant":
			text, err := m.Content.OnlyText(Kind, at)
			if err != nil {
				return nil, err
			}
			var blocks []block
			if text != "" {
				blocks = append(blocks, block{Text: &text})
			}
			for j, c := range m.ToolCalls {
				input, ok := c.ArgumentsObject()
				if !ok {
					return nil, refuse(fmt.Sprintf("%s.tool_calls[%d].function.arguments", at, j), "takes a tool call's arguments only as a JSON object")
				}
				blocks = append(blocks, block{ToolUse: &toolUse{ToolUseID: c.ID, Name: c.Function.Name, Input: input}})
			}
			req.Messages = appendTurn(req.Messages, "assistant", blocks)
		case "tool":
			if m.ToolCallID == "" {
				return nil, refuse(at+".tool_call_id", "needs the id of the tool call it answers")
			}
			text, err := m.Content.OnlyText(Kind, at)
			if err != nil {
				return nil, err
			}
			req.Messages = appendTurn(req.Messages, "user", []block{{ToolResult: &toolResult{ToolUseID: m.ToolCallID, Content: []toolResultContent{{Text: text}}}}})
		default:
			return nil, refuse(at+".role", fmt.Sprintf("Converse has no role %q", m.Role))
		}
	}
	if len(req.Messages) == 0 {
		return nil, refuse("messages", "needs at least one user message")
	}
	req.InferenceConfig = inferenceConfig{MaxTokens: r.MaxOutput(), Temperature: r.Temperature, TopP: r.TopP, StopSequences: r.Stop}
	if len(r.Tools) > 0 {
		tc := &toolConfig{Tools: make([]toolEntry, len(r.Tools))}
		for i, t := range r.Tools {
			if t.Type != "function" {
				return nil, refuse(fmt.Sprintf("tools[%d].type", i), "takes only function tools")
			}
			if t.Function.Strict != nil && *t.Function.Strict {
				return nil, refuse(fmt.Sprintf("tools[%d].function.strict", i), "Converse has no strict function schemas")
			}
			schema := t.Function.Parameters
			if len(schema) == 0 {
				schema = emptySchema
			}
			tc.Tools[i] = toolEntry{ToolSpec: toolSpec{Name: t.Function.Name, Description: t.Function.Description, InputSchema: inputSchema{JSON: schema}}}
		}
		req.ToolConfig = tc
	}
	if c := r.ToolChoice; c != nil {
		if req.ToolConfig == nil {
			return nil, refuse("tool_choice", "needs tools to choose from")
		}
		switch c.Mode {
		case "none":
			return nil, refuse("tool_choice", `Converse cannot forbid tool use ("none"); leave the tools out instead`)
		case "auto":
			req.ToolConfig.ToolChoice = &toolChoice{Auto: &struct{}{}}
		case "required":
			req.ToolConfig.ToolChoice = &toolChoice{Any: &struct{}{}}
		case "function":
			req.ToolConfig.ToolChoice = &toolChoice{Tool: &namedTool{Name: c.Function}}
		}
	}
	return req, nil
}

// appendTurn adds blocks as a turn of role, joined to the last turn when it has the same role.
func appendTurn(turns []message, role string, blocks []block) []message {
	if n := len(turns); n > 0 && turns[n-1].Role == role {
		turns[n-1].Content = append(turns[n-1].Content, blocks...)
		return turns
	}
	return append(turns, message{Role: role, Content: blocks})
}

// userBlocks are a user message's text and images; images only as data URLs of a format Converse takes.
func userBlocks(at string, c openai.Content) ([]block, error) {
	return openai.UserContent(Kind, at, c, func(text *string) block { return block{Text: text} },
		func(mediaType, data string) (block, string) {
			format, ok := imageFormats[mediaType]
			if !ok {
				return block{}, "takes PNG, JPEG, GIF and WebP images, not " + mediaType
			}
			return block{Image: &imageBlock{Format: format, Source: imageSource{Bytes: data}}}, ""
		})
}
