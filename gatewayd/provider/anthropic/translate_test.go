package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// throughSDK is a request as the SDK's MessageNewParams read and write it.
func throughSDK(t *testing.T, b []byte) []byte {
	t.Helper()
	var params sdk.MessageNewParams
	if err := json.Unmarshal(b, &params); err != nil {
		t.Fatalf("the SDK cannot read %s: %v", b, err)
	}
	out, err := json.Marshal(params)
	if err != nil || len(params.Messages) == 0 || params.MaxTokens == 0 {
		t.Fatalf("the SDK read %s as %s (%v)", b, out, err)
	}
	return out
}

var created = regexp.MustCompile(`"created":\d+`)

// TestRequestGolden translates OpenAI bodies into the requests of Anthropic's documented examples.
func TestRequestGolden(t *testing.T) {
	for _, name := range []string{"basic", "system", "tools", "image"} {
		got, err := TranslateRequest(providertest.Read(t, name+".openai.json"), "claude-sonnet-4-5")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		providertest.SameJSON(t, name, got, providertest.Read(t, name+".anthropic.json"))
		// The SDK's params read the request as they read the documented example.
		providertest.SameJSON(t, name+" through the SDK", throughSDK(t, got), throughSDK(t, providertest.Read(t, name+".anthropic.json")))
	}
}

// TestRequestRefusals: a member the Messages API cannot take is a *provider.Refused naming it, never dropped.
func TestRequestRefusals(t *testing.T) {
	for body, field := range map[string]string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"frequency_penalty":1}`:                           "frequency_penalty",
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`:        "response_format",
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2}`:                                           "n",
		`{"model":"m","messages":[{"role":"user","content":"hi","name":"bob"}]}`:                                    "messages[0].name",
		`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`:            "messages[0].content[0].input_audio",
		`{"model":"m","messages":[{"role":"user","content":[{"type":"file"}]}]}`:                                    "messages[0].content[0].type",
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x"}}]}]}`: "messages[0].content[0].image_url.url",
		`{"model":"m","messages":[]}`: "messages",
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_obfuscation":true}}`:             "stream_options.include_obfuscation",
		`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"[1]"}}]}]}`: "messages[0].tool_calls[0].function.arguments",
	} {
		_, err := TranslateRequest([]byte(body), "")
		var r *provider.Refused
		if !errors.As(err, &r) || r.Field != field || r.Provider != Kind {
			t.Errorf("%s: %v, want a refusal of %s", body, err, field)
		}
	}
	if _, _, err := (Provider{}).Request(nil, provider.Call{Route: "/embeddings"}); !isUnsupported(err) {
		t.Errorf("embeddings: %v, want provider.Unsupported", err)
	}
}

func isUnsupported(err error) bool {
	var u *provider.Unsupported
	return errors.As(err, &u)
}

// TestAnswerGolden translates Anthropic's documented answers and error, and holds the smaller struct this
// package decodes them with to the SDK's Message.
func TestAnswerGolden(t *testing.T) {
	tr := translation{}
	for _, name := range []string{"answer", "tool-answer"} {
		in := providertest.Read(t, name+".anthropic.json")
		got, u, err := tr.Answer(in)
		if err != nil {
			t.Fatal(err)
		}
		providertest.SameJSON(t, name, created.ReplaceAll(got, []byte(`"created":0`)), providertest.Read(t, name+".openai.json"))
		var mine Answer
		var theirs sdk.Message
		if json.Unmarshal(in, &mine) != nil || json.Unmarshal(in, &theirs) != nil {
			t.Fatal("undecodable golden answer")
		}
		if mine.ID != theirs.ID || mine.Model != string(theirs.Model) || mine.StopReason != string(theirs.StopReason) ||
			mine.Usage.InputTokens != theirs.Usage.InputTokens || mine.Usage.OutputTokens != theirs.Usage.OutputTokens ||
			mine.Usage.CacheReadInputTokens != theirs.Usage.CacheReadInputTokens || mine.Usage.CacheCreationInputTokens != theirs.Usage.CacheCreationInputTokens ||
			len(mine.Content) != len(theirs.Content) {
			t.Errorf("%s: decoded unlike the SDK: %+v vs %+v", name, mine, theirs)
		}
		for i, b := range theirs.Content {
			m := mine.Content[i]
			if m.Type != b.Type || (b.Type == "text" && *m.Text != b.Text) || (b.Type == "tool_use" && (m.ID != b.ID || m.Name != b.Name || string(m.Input) != string(b.Input))) {
				t.Errorf("%s block %d: %+v vs the SDK's %+v", name, i, m, b)
			}
		}
		if u.Total() == 0 {
			t.Errorf("%s: no usage", name)
		}
	}
	if _, u, _ := tr.Answer(providertest.Read(t, "answer.anthropic.json")); u.PromptTokens != 2095+10+100 || u.CompletionTokens != 503 {
		t.Errorf("usage %+v: cache writes and reads count as input", u)
	}
	providertest.SameJSON(t, "error", tr.Error(404, providertest.Read(t, "error.anthropic.json")), providertest.Read(t, "error.openai.json"))
	if got := string(tr.Error(502, []byte("<html>bad gateway</html>"))); !strings.Contains(got, "bad gateway") {
		t.Errorf("a non-JSON error: %s", got)
	}
}

// streamOf runs the stream translation of in, and returns the events it emitted, framed as Forward frames them.
func streamOf(in []byte, wantUsage bool) (string, upstream.Usage, error) {
	var out strings.Builder
	u, err := translation{}.Stream(bytes.NewReader(in), func(chunk []byte) error {
		out.WriteString("data: ")
		out.Write(chunk)
		out.WriteString("\n\n")
		return nil
	}, wantUsage)
	if err == nil {
		out.WriteString("data: [DONE]\n\n")
	}
	return out.String(), u, err
}

// TestStreamGolden translates Anthropic's documented streams into OpenAI chunks, and holds the events to what the
// SDK accumulates from the same bytes.
func TestStreamGolden(t *testing.T) {
	got, u, err := streamOf(providertest.Read(t, "stream.anthropic.sse"), true)
	if err != nil {
		t.Fatal(err)
	}
	want := string(providertest.Read(t, "stream.openai.sse"))
	if got = created.ReplaceAllString(got, `"created":0`); got != want {
		t.Errorf("stream:\n got %s\nwant %s", got, want)
	}
	if u.PromptTokens != 25 || u.CompletionTokens != 15 {
		t.Errorf("usage %+v", u)
	}
	got, _, err = streamOf(providertest.Read(t, "tool-stream.anthropic.sse"), false)
	if err != nil {
		t.Fatal(err)
	}
	var text, args strings.Builder
	var finish string
	for _, c := range chunks(t, got) {
		if len(c.Choices) == 0 {
			t.Fatal("a usage chunk the client did not ask for")
		}
		d := c.Choices[0].Delta
		if d.Content != nil {
			text.WriteString(*d.Content)
		}
		for _, tc := range d.ToolCalls {
			if *tc.Index != 0 {
				t.Errorf("tool call index %d", *tc.Index)
			}
			args.WriteString(tc.Function.Arguments)
		}
		if f := c.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	acc := accumulate(t, providertest.Read(t, "tool-stream.anthropic.sse"))
	if text.String() != acc.Content[0].Text || args.String() != string(acc.Content[1].Input) || finish != FinishReason(string(acc.StopReason)) {
		t.Errorf("text %q args %q finish %q; the SDK reads %q %s %s", text.String(), args.String(), finish, acc.Content[0].Text, acc.Content[1].Input, acc.StopReason)
	}
	// A stream that ends before message_stop is cut, not complete.
	cut := providertest.Read(t, "stream.anthropic.sse")
	if _, _, err := streamOf(cut[:bytes.Index(cut, []byte("event: message_delta"))], false); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a cut stream: %v", err)
	}
}

// chunks reads the OpenAI chunks of a translated stream, framed as Forward frames them.
func chunks(t *testing.T, stream string) []openai.ChatChunk {
	t.Helper()
	var out []openai.ChatChunk
	for _, line := range strings.Split(stream, "\n\n") {
		data := strings.TrimPrefix(line, "data: ")
		if data == "" || data == "[DONE]" {
			continue
		}
		var c openai.ChatChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		out = append(out, c)
	}
	return out
}

// accumulate is the SDK's Message of a stream's events.
func accumulate(t *testing.T, in []byte) sdk.Message {
	t.Helper()
	var acc sdk.Message
	err := upstream.ReadEvents(bytes.NewReader(in), func(data []byte) error {
		var e sdk.MessageStreamEventUnion
		if err := json.Unmarshal(data, &e); err != nil {
			return err
		}
		if e.Type == "ping" {
			return nil
		}
		return acc.Accumulate(e)
	})
	if err != nil {
		t.Fatal(err)
	}
	return acc
}
