package gemini

import (
	"fmt"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
)

// The generateContent request (https://ai.google.dev/api/generate-content#request-body), the members gatewayd
// writes.
type generateRequest struct {
	Contents          []content        `json:"contents"`
	SystemInstruction *content         `json:"systemInstruction,omitempty"`
	GenerationConfig  generationConfig `json:"generationConfig,omitzero"`
	Tools             []tool           `json:"tools,omitempty"`
	ToolConfig        *toolConfig      `json:"toolConfig,omitempty"`
}

type content struct {
	Role  string `json:"role,omitempty"`
	Parts []part `json:"parts"`
}

type part struct {
	Text             *string           `json:"text,omitempty"`
	Thought          bool              `json:"thought,omitzero"`
	InlineData       *blob             `json:"inlineData,omitempty"`
	FunctionCall     *functionCall     `json:"functionCall,omitempty"`
	FunctionResponse *functionResponse `json:"functionResponse,omitempty"`
}

type blob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type functionCall struct {
	ID   string         `json:"id,omitempty"`
	Name string         `json:"name"`
	Args jsontext.Value `json:"args,omitempty"`
}

type functionResponse struct {
	ID       string         `json:"id,omitempty"`
	Name     string         `json:"name"`
	Response jsontext.Value `json:"response"`
}

type generationConfig struct {
	MaxOutputTokens  *int64   `json:"maxOutputTokens,omitempty"`
	Temperature      *float64 `json:"temperature,omitempty"`
	TopP             *float64 `json:"topP,omitempty"`
	StopSequences    []string `json:"stopSequences,omitempty"`
	CandidateCount   *int64   `json:"candidateCount,omitempty"`
	PresencePenalty  *float64 `json:"presencePenalty,omitempty"`
	FrequencyPenalty *float64 `json:"frequencyPenalty,omitempty"`
	Seed             *int64   `json:"seed,omitempty"`
}

type tool struct {
	FunctionDeclarations []functionDeclaration `json:"functionDeclarations"`
}

// functionDeclaration carries the client's JSON Schema as parametersJsonSchema, which takes JSON Schema as
// OpenAI's clients write it; parameters takes only an OpenAPI subset.
type functionDeclaration struct {
	Name                 string         `json:"name"`
	Description          string         `json:"description,omitempty"`
	ParametersJSONSchema jsontext.Value `json:"parametersJsonSchema,omitempty"`
}

type toolConfig struct {
	FunctionCallingConfig functionCallingConfig `json:"functionCallingConfig"`
}

type functionCallingConfig struct {
	Mode                 string   `json:"mode"`
	AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
}

// translateRequest is the generateContent body of an OpenAI chat body.
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

func refuse(field, reason string) error {
	return &provider.Refused{Provider: Kind, Field: field, Reason: reason}
}

// fromChat maps a chat request onto generateContent: system and developer messages become the
// systemInstruction, user and tool messages user turns, assistant messages model turns; a tool message's answer
// is a functionResponse named after the tool call it answers.
func fromChat(r *openai.ChatRequest) (*generateRequest, error) {
	if r.N != nil && *r.N != 1 {
		return nil, refuse("n", "answers one choice only; send n = 1 or leave it out")
	}
	req := &generateRequest{Contents: make([]content, 0, len(r.Messages))}
	callNames := map[string]string{}
	for i, m := range r.Messages {
		at := fmt.Sprintf("messages[%d]", i)
		if m.Name != "" {
			return nil, refuse(at+".name", "does not take a participant name")
		}
		switch m.Role {
		case "system", "developer":
			parts, err := textParts(at, m.Content)
			if err != nil {
				return nil, err
			}
			if req.SystemInstruction == nil {
				req.SystemInstruction = &content{}
			}
			req.SystemInstruction.Parts = append(req.SystemInstruction.Parts, parts...)
		case "user":
			parts, err := userParts(at, m.Content)
			if err != nil {
				return nil, err
			}
			req.Contents = appendTurn(req.Contents, "user", parts)
		case "assistant":
			parts, err := textParts(at, m.Content)
			if err != nil {
				return nil, err
			}
			for j, c := range m.ToolCalls {
				args, ok := c.ArgumentsObject()
				if !ok {
					return nil, refuse(fmt.Sprintf("%s.tool_calls[%d].function.arguments", at, j), "takes a tool call's arguments only as a JSON object")
				}
				callNames[c.ID] = c.Function.Name
				parts = append(parts, part{FunctionCall: &functionCall{ID: c.ID, Name: c.Function.Name, Args: args}})
			}
			req.Contents = appendTurn(req.Contents, "model", parts)
		case "tool":
			name, ok := callNames[m.ToolCallID]
			if !ok {
				return nil, refuse(at+".tool_call_id", "needs the id of a tool call of an earlier assistant message")
			}
			text, err := m.Content.OnlyText(Kind, at)
			if err != nil {
				return nil, err
			}
			resp, _ := json.Marshal(map[string]string{"content": text})
			req.Contents = appendTurn(req.Contents, "user", []part{{FunctionResponse: &functionResponse{ID: m.ToolCallID, Name: name, Response: resp}}})
		default:
			return nil, refuse(at+".role", fmt.Sprintf("does not take the role %q", m.Role))
		}
	}
	if len(req.Contents) == 0 {
		return nil, refuse("messages", "needs at least one user message")
	}
	req.GenerationConfig = generationConfig{MaxOutputTokens: r.MaxOutput(), Temperature: r.Temperature, TopP: r.TopP,
		StopSequences: r.Stop, PresencePenalty: r.PresencePenalty, FrequencyPenalty: r.FrequencyPenalty, Seed: r.Seed}
	if len(r.Tools) > 0 {
		decls := make([]functionDeclaration, len(r.Tools))
		for i, t := range r.Tools {
			if t.Type != "function" {
				return nil, refuse(fmt.Sprintf("tools[%d].type", i), "takes only function tools")
			}
			if t.Function.Strict != nil && *t.Function.Strict {
				return nil, refuse(fmt.Sprintf("tools[%d].function.strict", i), "does not take strict function schemas")
			}
			decls[i] = functionDeclaration{Name: t.Function.Name, Description: t.Function.Description, ParametersJSONSchema: t.Function.Parameters}
		}
		req.Tools = []tool{{FunctionDeclarations: decls}}
	}
	if c := r.ToolChoice; c != nil {
		fc := functionCallingConfig{}
		switch c.Mode {
		case "none":
			fc.Mode = "NONE"
		case "auto":
			fc.Mode = "AUTO"
		case "required":
			fc.Mode = "ANY"
		case "function":
			fc.Mode, fc.AllowedFunctionNames = "ANY", []string{c.Function}
		}
		req.ToolConfig = &toolConfig{FunctionCallingConfig: fc}
	}
	return req, nil
}

// appendTurn adds parts as a turn of role, joined to the last turn when it has the same role: the tool answers of
// one assistant turn are one user turn, as Gemini expects.
func appendTurn(turns []content, role string, parts []part) []content {
	if n := len(turns); n > 0 && turns[n-1].Role == role {
		turns[n-1].Parts = append(turns[n-1].Parts, parts...)
		return turns
	}
	return append(turns, content{Role: role, Parts: parts})
}

// userParts are a user message's text and images; images only as data URLs, sent inline.
func userParts(at string, c openai.Content) ([]part, error) {
	return openai.UserContent(Kind, at, c, func(text *string) part { return part{Text: text} },
		func(mediaType, data string) (part, string) {
			return part{InlineData: &blob{MimeType: mediaType, Data: data}}, ""
		})
}

// textParts are the text of a message that takes only text (system, assistant) as one part; empty text is none.
func textParts(at string, c openai.Content) ([]part, error) {
	text, err := c.OnlyText(Kind, at)
	if err != nil || text == "" {
		return nil, err
	}
	return []part{{Text: &text}}, nil
}
