package openai

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"sync"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// What the translating providers share: reading a chat body's members the way every provider maps them, and
// writing OpenAI's chunks.

// TextOnly is the text of content that may hold only text (a system, assistant or tool message): the string, or
// its text parts joined. bad is the index of the first part that is not text, -1 when none is.
func (c Content) TextOnly() (text string, bad int) {
	if c.Parts == nil {
		return c.Text, -1
	}
	var b bytes.Buffer
	for i, p := range c.Parts {
		if p.Type != "text" {
			return "", i
		}
		b.WriteString(p.Text)
	}
	return b.String(), -1
}

// OnlyText is TextOnly for the message at at (messages[i]) of a provider kind that takes only text in it: a part
// that is not text is the client's 400 naming that part.
func (c Content) OnlyText(kind, at string) (string, error) {
	text, bad := c.TextOnly()
	if bad >= 0 {
		return "", &provider.Refused{Provider: kind, Field: fmt.Sprintf("%s.content[%d].type", at, bad), Reason: "takes only text in this message"}
	}
	return text, nil
}

// Image is an image part's media type and base64 data, when its URL is a data URL.
func (p ContentPart) Image() (mediaType, data string, err error) {
	var u string
	if p.ImageURL != nil {
		u = p.ImageURL.URL
	}
	return DataURL(u)
}

// Arguments is a tool call's arguments as the JSON object a provider takes ({} when the client sent none); ok is
// false when they are not a JSON object.
func (c ToolCall) ArgumentsObject() (args jsontext.Value, ok bool) {
	if c.Function.Arguments == "" {
		return jsontext.Value("{}"), true
	}
	args = jsontext.Value(c.Function.Arguments)
	return args, args.Kind() == '{' && args.IsValid()
}

// Arguments is a provider's tool call input (a JSON object) as OpenAI's arguments string, compacted; "{}" when
// it is absent or not JSON.
func Arguments(input jsontext.Value) string {
	v := jsontext.Value(bytes.Clone(input))
	if len(v) == 0 || v.Compact() != nil {
		return "{}"
	}
	return string(v)
}

// ModelOf is the model a try on t asks for: the target's, or else the client's.
func ModelOf(t *view.Target, body []byte) string {
	if t.TargetModel != "" {
		return t.TargetModel
	}
	var m struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &m)
	return m.Model
}

// ChunkWriter writes a translated stream's OpenAI chunks, each with the answer's id, time and model, to Emit.
type ChunkWriter struct {
	ID      string
	Created int64
	Model   string
	Emit    func(chunk []byte) error
	started bool
}

// Send writes c.
func (w *ChunkWriter) Send(c ChatChunk) error {
	c.ID, c.Object, c.Created, c.Model = w.ID, ObjectChunk, w.Created, w.Model
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return w.Emit(b)
}

// Delta writes d as the next piece of the answer, and its finish reason when finish is set; the first piece says
// the role.
func (w *ChunkWriter) Delta(d Delta, finish *string) error {
	if !w.started {
		d.Role, w.started = "assistant", true
	}
	return w.Send(ChatChunk{Choices: []ChunkChoice{{Delta: d, FinishReason: finish}}})
}

// UsageOf is an answer's usage in OpenAI's form.
func UsageOf(u upstream.Usage) ChatUsage {
	return ChatUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
}

// Usage writes the final usage chunk, which has no choices.
func (w *ChunkWriter) Usage(u ChatUsage) error {
	return w.Send(ChatChunk{Choices: []ChunkChoice{}, Usage: &u})
}

// UserContent maps a user message's content, at field path at, onto a provider's parts: each text as text(its
// text), each image part's data URL as image(its media type, its base64 data), which may refuse it by returning
// a reason. Any other part, and an image that is not a data URL, is refused for the provider kind.
func UserContent[T any](kind, at string, c Content, text func(*string) T, image func(mediaType, data string) (T, string)) ([]T, error) {
	if c.Parts == nil {
		return []T{text(&c.Text)}, nil
	}
	out := make([]T, 0, len(c.Parts))
	for j, p := range c.Parts {
		switch p.Type {
		case "text":
			out = append(out, text(&p.Text))
		case "image_url":
			field := fmt.Sprintf("%s.content[%d].image_url.url", at, j)
			mediaType, data, err := p.Image()
			if err != nil {
				return nil, &provider.Refused{Provider: kind, Field: field, Reason: "takes images only inline: " + err.Error()}
			}
			v, reason := image(mediaType, data)
			if reason != "" {
				return nil, &provider.Refused{Provider: kind, Field: field, Reason: reason}
			}
			out = append(out, v)
		default:
			return nil, &provider.Refused{Provider: kind, Field: fmt.Sprintf("%s.content[%d].type", at, j), Reason: fmt.Sprintf("takes no %q parts", p.Type)}
		}
	}
	return out, nil
}

// streamReaders keep the buffered readers of finished streams for the next ones: a translated stream reads its
// upstream through one, and allocating 16 KiB per stream was most of a stream translation's bytes.
var streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// StreamReader is a pooled buffered reader of r, for a Translation's Stream; ReleaseStreamReader gives it back.
func StreamReader(r io.Reader) *bufio.Reader {
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

// ReleaseStreamReader returns br, which StreamReader gave, to the pool.
func ReleaseStreamReader(br *bufio.Reader) {
	br.Reset(nil)
	streamReaders.Put(br)
}
