package gemini

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	json "github.com/go-json-experiment/json"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
	"github.com/modelgate/modelgate/gatewayd/view"
)

var target = &view.Target{Provider: Kind, BaseURL: "https://generativelanguage.googleapis.com/v1beta", TargetModel: "gemini-2.0-flash"}

func testTranslation(embed bool) *translation {
	return &translation{id: "chatcmpl-test", model: "gemini-2.0-flash", created: 1700000000, embed: embed}
}

// TestRequestGolden translates the chat bodies of testdata/*.request.json into generateContent calls.
func TestRequestGolden(t *testing.T) {
	providertest.RequestGolden(t, Provider{}, target, func(name string) string {
		if strings.HasPrefix(name, "embed") {
			return "/embeddings"
		}
		return "/chat/completions"
	})
}

// TestAnswerGolden translates generateContent answers (testdata/*.answer.json) into OpenAI's.
func TestAnswerGolden(t *testing.T) {
	in := providertest.Inputs(t, ".answer.json")
	for _, name := range slices.Sorted(maps.Keys(in)) {
		t.Run(name, func(t *testing.T) {
			body := in[name]
			tr := testTranslation(strings.HasPrefix(name, "embed"))
			if name == "error" {
				providertest.Golden(t, name+".answer.golden.json", providertest.Indent(t, tr.Error(400, body)))
				return
			}
			out, u, err := tr.Answer(body)
			if err != nil {
				t.Fatal(err)
			}
			var got openai.ChatUsage
			if !strings.HasPrefix(name, "embed") {
				var a openai.ChatCompletion
				if err := json.Unmarshal(out, &a); err != nil {
					t.Fatal(err)
				}
				got = a.Usage
			}
			if !strings.HasPrefix(name, "embed") && (got.PromptTokens != u.PromptTokens || got.CompletionTokens != u.CompletionTokens) {
				t.Errorf("the answer's usage %+v is not the usage charged %+v", got, u)
			}
			providertest.Golden(t, name+".answer.golden.json", providertest.Indent(t, out))
		})
	}
}

// TestStreamGolden translates streamed answers (testdata/*.stream.sse) into OpenAI chunks, with and without the
// usage chunk, read one byte at a time so that no event depends on how the upstream's writes were cut; an error
// event mid-stream (overloaded) ends it with OpenAI's error chunk.
func TestStreamGolden(t *testing.T) {
	in := providertest.Inputs(t, ".stream.sse")
	for _, name := range slices.Sorted(maps.Keys(in)) {
		t.Run(name, func(t *testing.T) {
			body := in[name]
			var chunks [][]byte
			u, err := testTranslation(false).Stream(iotest.OneByteReader(bytes.NewReader(body)), func(c []byte) error {
				chunks = append(chunks, bytes.Clone(c))
				return nil
			}, true)
			out := providertest.SSE(chunks)
			// An error event ends the stream with an error chunk and an error, as the golden file shows.
			failed := name == "overloaded"
			if (err != nil) != failed {
				t.Fatalf("err = %v", err)
			}
			if !failed && (u.PromptTokens == 0 || u.CompletionTokens == 0) {
				t.Errorf("usage %+v: the last usageMetadata was not read", u)
			}
			providertest.Golden(t, name+".stream.golden.txt", out)
			var without []byte
			_, _ = testTranslation(false).Stream(bytes.NewReader(body), func(c []byte) error {
				without = append(without, c...)
				return nil
			}, false)
			if bytes.Contains(without, []byte(`"usage"`)) {
				t.Errorf("a usage chunk the client did not ask for was sent:\n%s", without)
			}
		})
	}
}

// TestStreamEmitsAsItReads checks that each event is translated as soon as it arrives, not at the end.
func TestStreamEmitsAsItReads(t *testing.T) {
	pr, pw := io.Pipe()
	chunks := make(chan string, 8)
	done := make(chan error, 1)
	go func() {
		_, err := testTranslation(false).Stream(pr, func(c []byte) error { chunks <- string(c); return nil }, false)
		done <- err
	}()
	go func() {
		_, _ = io.WriteString(pw, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"first\"}],\"role\":\"model\"}}]}\r\n\r\n")
	}()
	if c := <-chunks; !strings.Contains(c, `"content":"first"`) {
		t.Fatalf("first chunk %q", c)
	}
	_, _ = io.WriteString(pw, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"!\"}],\"role\":\"model\"},\"finishReason\":\"STOP\"}]}\n\n")
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStreamCutShort: a stream that ends before Gemini's finishReason is incomplete, not a finished answer.
func TestStreamCutShort(t *testing.T) {
	body := "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"half\"}],\"role\":\"model\"}}]}\n\n"
	_, err := testTranslation(false).Stream(strings.NewReader(body), func([]byte) error { return nil }, false)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestRefused: a member GEMINI cannot take is the client's 400 naming the member and the provider.
func TestRefused(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":true}`, "logprobs"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2}`, "n"},
		{`{"model":"m","messages":[{"role":"user","name":"ann","content":"hi"}]}`, "messages[0].name"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`, "messages[0].content[0].image_url.url"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`, "messages[0].content[0].input_audio"},
		{`{"model":"m","messages":[{"role":"tool","tool_call_id":"nope","content":"x"}]}`, "messages[0].tool_call_id"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","strict":true}}]}`, "tools[0].function.strict"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`, "response_format"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, "temperature"},
	} {
		_, _, err := Provider{}.Request(target, provider.Call{Route: "/chat/completions", Body: []byte(c.body)})
		var rf *provider.Refused
		if !errors.As(err, &rf) || rf.Field != c.field || rf.Provider != Kind {
			t.Errorf("%s: err = %v, want a provider.Refused of %s naming %s", c.body, err, Kind, c.field)
		}
	}
	_, _, err := Provider{}.Request(target, provider.Call{Route: "/completions", Body: []byte(`{"model":"m","prompt":"x"}`)})
	var us *provider.Unsupported
	if !errors.As(err, &us) {
		t.Errorf("/completions: err = %v, want provider.Unsupported", err)
	}
}

// TestEmbeddingsBase64 checks the base64 answer against the floats: little-endian float32s, as OpenAI sends.
func TestEmbeddingsBase64(t *testing.T) {
	body, err := os.ReadFile("testdata/embed.answer.json")
	if err != nil {
		t.Fatal(err)
	}
	tr := testTranslation(true)
	tr.base64 = true
	out, _, err := tr.Answer(body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte(`"embedding":"`)) {
		t.Fatalf("not base64: %s", out)
	}
	providertest.Golden(t, "embed.base64.golden.json", providertest.Indent(t, out))
}

// FuzzTranslation feeds the translators any body, answer and stream: they never panic, usage is never negative,
// and a stream's text reaches the client whole and in order, whatever the pieces it arrives in.
func FuzzTranslation(f *testing.F) {
	for _, suffix := range []string{".request.json", ".answer.json", ".stream.sse"} {
		for name, b := range providertest.Inputs(f, suffix) {
			f.Add(b, name+" \u00e9\u4e16", uint8(len(b)))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, text string, cut uint8) {
		_, _, _ = Provider{}.Request(target, provider.Call{Route: "/chat/completions", Body: body, Stream: cut%2 == 0})
		_, _, _ = Provider{}.Request(target, provider.Call{Route: "/embeddings", Body: body})
		tr := testTranslation(cut%3 == 0)
		_ = tr.Error(int(cut)+400, body)
		if _, u, err := tr.Answer(body); err == nil && (u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < 0) {
			t.Fatalf("negative usage %+v", u)
		}
		u, _ := testTranslation(false).Stream(bytes.NewReader(body), func([]byte) error { return nil }, true)
		if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < 0 {
			t.Fatalf("negative usage %+v", u)
		}
		// The text, cut into events at cut-dependent places, comes back whole and in order.
		var stream bytes.Buffer
		pieces := providertest.SplitText(text, int(cut%7)+1)
		for i, p := range pieces {
			ev := map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": p}}}}}}
			if i == len(pieces)-1 {
				ev["candidates"].([]any)[0].(map[string]any)["finishReason"] = "STOP"
			}
			b, _ := json.Marshal(ev)
			stream.WriteString("data: " + string(b) + "\r\n\r\n")
		}
		var got strings.Builder
		_, err := testTranslation(false).Stream(iotest.HalfReader(&stream), providertest.TextInto(t, &got), false)
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.Join(pieces, ""); got.String() != want {
			t.Fatalf("stream text %q, want %q", got.String(), want)
		}
	})
}

// TestStreamLongEvent: an event longer than the reader's buffer arrives whole.
func TestStreamLongEvent(t *testing.T) {
	long := strings.Repeat("abcdefghij", 5000)
	body := "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"" + long + "\"}],\"role\":\"model\"},\"finishReason\":\"STOP\"}]}\n\n"
	var got strings.Builder
	if _, err := testTranslation(false).Stream(strings.NewReader(body), providertest.TextInto(t, &got), false); err != nil {
		t.Fatal(err)
	}
	if got.String() != long {
		t.Errorf("got %d bytes of text, want %d", got.Len(), len(long))
	}
}
