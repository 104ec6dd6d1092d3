package bedrock

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	json "github.com/go-json-experiment/json"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
	"github.com/modelgate/modelgate/gatewayd/view"
)

const modelID = "anthropic.claude-3-haiku-20240307-v1:0"

var target = &view.Target{Provider: Kind, BaseURL: "https://bedrock-runtime.us-east-1.amazonaws.com", TargetModel: modelID, Region: "us-east-1"}

func testTranslation() *translation {
	return &translation{id: "chatcmpl-test", model: modelID, created: 1700000000}
}

// TestRequestGolden translates the chat bodies of testdata/*.request.json into Converse calls.
func TestRequestGolden(t *testing.T) {
	providertest.RequestGolden(t, Provider{}, target, func(string) string { return "/chat/completions" })
}

// TestAnswerGolden translates Converse answers (testdata/*.answer.json) into OpenAI's.
func TestAnswerGolden(t *testing.T) {
	in := providertest.Inputs(t, ".answer.json")
	for _, name := range slices.Sorted(maps.Keys(in)) {
		t.Run(name, func(t *testing.T) {
			if name == "error" {
				out := testTranslation().Error(403, in[name])
				if bytes.Contains(out, []byte("IQoJ")) || bytes.Contains(out, []byte("Canonical")) {
					t.Errorf("the error passed on the signed request it echoed: %s", out)
				}
				providertest.Golden(t, name+".answer.golden.json", providertest.Indent(t, out))
				return
			}
			out, u, err := testTranslation().Answer(in[name])
			if err != nil {
				t.Fatal(err)
			}
			var a openai.ChatCompletion
			if err := json.Unmarshal(out, &a); err != nil {
				t.Fatal(err)
			}
			if a.Usage.PromptTokens != u.PromptTokens || a.Usage.CompletionTokens != u.CompletionTokens || u.PromptTokens == 0 {
				t.Errorf("the answer's usage %+v is not the usage charged %+v", a.Usage, u)
			}
			providertest.Golden(t, name+".answer.golden.json", providertest.Indent(t, out))
		})
	}
}

// eventStream encodes testdata/*.stream.jsonl, one "<event type> <payload>" per line ("!<exception type>" for an
// exception), as Bedrock's AWS event stream, with aws-sdk-go-v2's encoder.
func eventStream(t testing.TB, lines []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	enc := eventstream.NewEncoder()
	for line := range strings.Lines(string(lines)) {
		kind, payload, _ := strings.Cut(strings.TrimSpace(line), " ")
		msg := eventstream.Message{Payload: []byte(payload)}
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		if exc, ok := strings.CutPrefix(kind, "!"); ok {
			msg.Headers.Set(":message-type", eventstream.StringValue("exception"))
			msg.Headers.Set(":exception-type", eventstream.StringValue(exc))
		} else {
			msg.Headers.Set(":message-type", eventstream.StringValue("event"))
			msg.Headers.Set(":event-type", eventstream.StringValue(kind))
		}
		if err := enc.Encode(&out, msg); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// streamed runs a stream's translation over body read one byte at a time, and returns the events Forward sends.
func streamed(t testing.TB, body []byte, wantUsage bool) ([]byte, error) {
	var chunks [][]byte
	_, err := testTranslation().Stream(iotest.OneByteReader(bytes.NewReader(body)), func(c []byte) error {
		chunks = append(chunks, bytes.Clone(c))
		return nil
	}, wantUsage)
	return providertest.SSE(chunks), err
}

// TestStreamGolden translates ConverseStream answers (testdata/*.stream.jsonl, encoded as AWS event streams) into
// OpenAI chunks; an exception ends the stream with an error chunk and an error.
func TestStreamGolden(t *testing.T) {
	in := providertest.Inputs(t, ".stream.jsonl")
	for _, name := range slices.Sorted(maps.Keys(in)) {
		t.Run(name, func(t *testing.T) {
			body := eventStream(t, in[name])
			out, err := streamed(t, body, true)
			if (err != nil) != (name == "throttled") {
				t.Fatalf("err = %v", err)
			}
			providertest.Golden(t, name+".stream.golden.txt", out)
			without, _ := streamed(t, body, false)
			if bytes.Contains(without, []byte(`"usage"`)) {
				t.Errorf("a usage chunk the client did not ask for was sent:\n%s", without)
			}
		})
	}
}

// TestStreamEmitsAsItReads checks that each event is translated as soon as it arrives, not at the end.
func TestStreamEmitsAsItReads(t *testing.T) {
	body := eventStream(t, []byte("messageStart {\"role\":\"assistant\"}\ncontentBlockDelta {\"contentBlockIndex\":0,\"delta\":{\"text\":\"first\"}}\n"))
	rest := eventStream(t, []byte("messageStop {\"stopReason\":\"end_turn\"}\nmetadata {\"usage\":{\"inputTokens\":1,\"outputTokens\":1}}\n"))
	pr, pw := io.Pipe()
	chunks := make(chan string, 8)
	done := make(chan error, 1)
	go func() {
		_, err := testTranslation().Stream(pr, func(c []byte) error { chunks <- string(c); return nil }, false)
		done <- err
	}()
	go func() { _, _ = pw.Write(body) }()
	<-chunks // the role
	if c := <-chunks; !strings.Contains(c, `"content":"first"`) {
		t.Fatalf("second chunk %q", c)
	}
	_, _ = pw.Write(rest)
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStreamCutShort: a stream that ends before its metadata is incomplete.
func TestStreamCutShort(t *testing.T) {
	body := eventStream(t, []byte("messageStart {\"role\":\"assistant\"}\n"))
	if _, err := streamed(t, body, false); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := streamed(t, body[:len(body)-3], false); err == nil {
		t.Fatal("a message cut in the middle was read")
	}
}

// TestRefused: a member BEDROCK cannot take is the client's 400 naming the member and the provider; embeddings
// are not served.
func TestRefused(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"seed":1}`, "seed"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"presence_penalty":1}`, "presence_penalty"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"frequency_penalty":1}`, "frequency_penalty"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":3}`, "n"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"logit_bias":{"1":2}}`, "logit_bias"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}`, "tool_choice"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/tiff;base64,AAAA"}}]}]}`, "messages[0].content[0].image_url.url"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`, "messages[0].content[0].image_url.url"},
		{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{`{"model":"m","messages":[{"role":"critic","content":"x"}]}`, "messages[0].role"},
	} {
		_, _, err := Provider{}.Request(target, provider.Call{Route: "/chat/completions", Body: []byte(c.body)})
		var rf *provider.Refused
		if !errors.As(err, &rf) || rf.Field != c.field || rf.Provider != Kind {
			t.Errorf("%s: err = %v, want a provider.Refused of %s naming %s", c.body, err, Kind, c.field)
		}
	}
	_, _, err := Provider{}.Request(target, provider.Call{Route: "/embeddings", Body: []byte(`{"model":"m","input":"x"}`)})
	var us *provider.Unsupported
	if !errors.As(err, &us) || us.Provider != Kind {
		t.Errorf("/embeddings: err = %v, want provider.Unsupported", err)
	}
}

// TestModelIDEscaped: the model id is a path label escaped as aws-sdk-go-v2 escapes it.
func TestModelIDEscaped(t *testing.T) {
	arn := &view.Target{BaseURL: "http://127.0.0.1:1", TargetModel: "arn:aws:bedrock:us-east-1::foundation-model/" + modelID}
	url, _, err := Provider{}.Request(arn, provider.Call{Route: "/chat/completions", Body: []byte(`{"messages":[{"role":"user","content":"x"}]}`), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://127.0.0.1:1/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A%3Afoundation-model%2Fanthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"; url != want {
		t.Errorf("url %s, want %s", url, want)
	}
}

// FuzzTranslation feeds the translators any body, answer and event stream: they never panic, usage is never
// negative, and a stream's text reaches the client whole and in order, whatever the pieces it arrives in.
func FuzzTranslation(f *testing.F) {
	for _, suffix := range []string{".request.json", ".answer.json", ".stream.jsonl"} {
		for name, b := range providertest.Inputs(f, suffix) {
			if suffix == ".stream.jsonl" {
				b = eventStream(f, b)
			}
			f.Add(b, name, uint8(len(b)))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, text string, cut uint8) {
		_, _, _ = Provider{}.Request(target, provider.Call{Route: "/chat/completions", Body: body, Stream: cut%2 == 0})
		tr := testTranslation()
		_ = tr.Error(int(cut)+400, body)
		if _, u, err := tr.Answer(body); err == nil && (u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < 0) {
			t.Fatalf("negative usage %+v", u)
		}
		u, _ := tr.Stream(bytes.NewReader(body), func([]byte) error { return nil }, true)
		if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < 0 {
			t.Fatalf("negative usage %+v", u)
		}
		// The text, cut into deltas at cut-dependent places, comes back whole and in order.
		pieces := providertest.SplitText(text, int(cut%7)+1)
		lines := "messageStart {\"role\":\"assistant\"}\n"
		for _, p := range pieces {
			b, _ := json.Marshal(map[string]any{"contentBlockIndex": 0, "delta": map[string]string{"text": p}})
			lines += "contentBlockDelta " + string(b) + "\n"
		}
		lines += "messageStop {\"stopReason\":\"end_turn\"}\nmetadata {\"usage\":{\"inputTokens\":1,\"outputTokens\":2}}\n"
		var got strings.Builder
		_, err := testTranslation().Stream(iotest.HalfReader(bytes.NewReader(eventStream(t, []byte(lines)))), providertest.TextInto(t, &got), false)
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.Join(pieces, ""); got.String() != want {
			t.Fatalf("stream text %q, want %q", got.String(), want)
		}
	})
}
