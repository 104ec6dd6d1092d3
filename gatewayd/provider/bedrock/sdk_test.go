package bedrock

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	json "github.com/go-json-experiment/json"
	"github.com/google/go-cmp/cmp"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// The smaller structs of this package stand in for bedrockruntime's types. These tests hold them to the SDK:
// aws-sdk-go-v2's own Bedrock client sends the same call to a loopback fake (path, body, signature) and reads the
// same answers and event streams the translation reads.

var sdkCreds = aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", SessionToken: "IQoJb3JpZ2luX2VjEXAMPLE"}

// seen is a call the fake received.
type seen struct {
	path string
	body []byte
	err  error
}

// fake answers every call with answer (as contentType) and reports what it received, its signature checked.
func fake(t *testing.T, contentType string, answer []byte) (*httptest.Server, chan seen) {
	calls := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls <- seen{path: r.URL.EscapedPath(), body: b, err: providertest.VerifySigV4(r, b, sdkCreds, SigningName, "us-east-1")}
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	return srv, calls
}

func sdk(srv *httptest.Server) *bedrockruntime.Client {
	return bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), HTTPClient: srv.Client(),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return sdkCreds, nil }),
		Retryer:     aws.NopRetryer{}})
}

func text(s string) types.ContentBlock { return &types.ContentBlockMemberText{Value: s} }

// TestSDKSendsTheSameCall: the Converse call the SDK sends for the members of testdata/tools.request.json and
// image.request.json is the one gatewayd sends, path and body; its signature is what VerifySigV4 recomputes.
func TestSDKSendsTheSameCall(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n")
	inputs := map[string]*bedrockruntime.ConverseInput{
		"tools": {ModelId: aws.String(modelID),
			Messages: []types.Message{
				{Role: types.ConversationRoleUser, Content: []types.ContentBlock{text("What is the most popular song on WZPZ?")}},
				{Role: types.ConversationRoleAssistant, Content: []types.ContentBlock{text("To find the most popular song on WZPZ, I will use the top_song tool."),
					&types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{ToolUseId: aws.String("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"), Name: aws.String("top_song"),
						Input: document.NewLazyDocument(map[string]any{"sign": "WZPZ"})}}}},
				{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
					ToolUseId: aws.String("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"),
					Content:   []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "Elemental Hotel by 8 Storey Hike"}}}}}},
			},
			ToolConfig: &types.ToolConfiguration{
				Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{Name: aws.String("top_song"),
					Description: aws.String("Get the most popular song played on a radio station."),
					InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{
						"type": "object", "required": []string{"sign"},
						"properties": map[string]any{"sign": map[string]any{"type": "string",
							"description": "The call sign for the radio station for which you want the most popular song. Example calls signs are WZPZ and WKRP."}}})}}}},
				ToolChoice: &types.ToolChoiceMemberAny{Value: types.AnyToolChoice{}}},
		},
		"image": {ModelId: aws.String(modelID),
			Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{text("What's in this image?"),
				&types.ContentBlockMemberImage{Value: types.ImageBlock{Format: types.ImageFormatPng, Source: &types.ImageSourceMemberBytes{Value: png}}}}}},
			InferenceConfig: &types.InferenceConfiguration{MaxTokens: aws.Int32(200)},
			ToolConfig: &types.ToolConfiguration{
				Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{Name: aws.String("describe"),
					InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{"type": "object", "properties": map[string]any{}})}}}},
				ToolChoice: &types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String("describe")}}},
		},
	}
	answer, _ := os.ReadFile("testdata/text.answer.json")
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			srv, calls := fake(t, "application/json", answer)
			if _, err := sdk(srv).Converse(context.Background(), in); err != nil {
				t.Fatal(err)
			}
			got := <-calls
			if got.err != nil {
				t.Errorf("the recomputed signature does not match the SDK's: %v", got.err)
			}
			body, _ := os.ReadFile("testdata/" + name + ".request.json")
			url, ours, err := Provider{}.Request(&view.Target{BaseURL: srv.URL, TargetModel: modelID}, provider.Call{Route: "/chat/completions", Body: body})
			if err != nil {
				t.Fatal(err)
			}
			if want := srv.URL + got.path; url != want {
				t.Errorf("url %s, the SDK's %s", url, want)
			}
			var a, b any
			if err := json.Unmarshal(got.body, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(ours, &b); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(a, b); d != "" {
				t.Errorf("the body differs from the SDK's (-sdk +ours):\n%s", d)
			}
		})
	}
}

// TestSDKReadsTheSameAnswer: the SDK and the translation read the same text, tool calls, stop reason and usage
// from each Converse answer of testdata.
func TestSDKReadsTheSameAnswer(t *testing.T) {
	for _, name := range []string{"text", "tools", "cached"} {
		t.Run(name, func(t *testing.T) {
			answer, _ := os.ReadFile("testdata/" + name + ".answer.json")
			srv, _ := fake(t, "application/json", answer)
			out, err := sdk(srv).Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(modelID),
				Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{text("hi")}}}})
			if err != nil {
				t.Fatal(err)
			}
			var want openai.AssistantMessage
			var texts []string
			for _, b := range out.Output.(*types.ConverseOutputMemberMessage).Value.Content {
				switch b := b.(type) {
				case *types.ContentBlockMemberText:
					texts = append(texts, b.Value)
				case *types.ContentBlockMemberToolUse:
					var input any
					if err := b.Value.Input.UnmarshalSmithyDocument(&input); err != nil {
						t.Fatal(err)
					}
					args, _ := json.Marshal(input, json.Deterministic(true))
					want.ToolCalls = append(want.ToolCalls, openai.ToolCall{ID: *b.Value.ToolUseId, Type: "function",
						Function: openai.FunctionCall{Name: *b.Value.Name, Arguments: string(args)}})
				}
			}
			s := strings.Join(texts, "")
			want.Role, want.Content = "assistant", &s
			wantUsage := openai.ChatUsage{PromptTokens: int64(*out.Usage.InputTokens + aws.ToInt32(out.Usage.CacheReadInputTokens) + aws.ToInt32(out.Usage.CacheWriteInputTokens)),
				CompletionTokens: int64(*out.Usage.OutputTokens), TotalTokens: int64(*out.Usage.TotalTokens)}

			b, _, err := testTranslation().Answer(answer)
			if err != nil {
				t.Fatal(err)
			}
			var got openai.ChatCompletion
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got.Choices[0].Message); d != "" {
				t.Errorf("message (-sdk +ours):\n%s", d)
			}
			if r := finishReason(string(out.StopReason)); got.Choices[0].FinishReason != r {
				t.Errorf("finish_reason %s, the SDK's stop reason %s maps to %s", got.Choices[0].FinishReason, out.StopReason, r)
			}
			if got.Usage != wantUsage {
				t.Errorf("usage %+v, the SDK's %+v", got.Usage, wantUsage)
			}
		})
	}
}

// TestSDKReadsTheSameStream: the SDK and the translation read the same text, tool calls, stop reason and usage
// from each event stream of testdata, encoded with aws-sdk-go-v2's eventstream encoder.
func TestSDKReadsTheSameStream(t *testing.T) {
	for _, name := range []string{"text", "tools"} {
		t.Run(name, func(t *testing.T) {
			lines, _ := os.ReadFile("testdata/" + name + ".stream.jsonl")
			answer := eventStream(t, lines)
			srv, _ := fake(t, "application/vnd.amazon.eventstream", answer)
			out, err := sdk(srv).ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String(modelID),
				Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{text("hi")}}}})
			if err != nil {
				t.Fatal(err)
			}
			var want, got streamSummary
			for ev := range out.GetStream().Events() {
				switch ev := ev.(type) {
				case *types.ConverseStreamOutputMemberContentBlockStart:
					if tu, ok := ev.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
						want.tools = append(want.tools, *tu.Value.ToolUseId+" "+*tu.Value.Name+" ")
					}
				case *types.ConverseStreamOutputMemberContentBlockDelta:
					switch d := ev.Value.Delta.(type) {
					case *types.ContentBlockDeltaMemberText:
						want.text += d.Value
					case *types.ContentBlockDeltaMemberToolUse:
						want.tools[len(want.tools)-1] += *d.Value.Input
					}
				case *types.ConverseStreamOutputMemberMessageStop:
					want.finish = finishReason(string(ev.Value.StopReason))
				case *types.ConverseStreamOutputMemberMetadata:
					want.usage = openai.ChatUsage{PromptTokens: int64(*ev.Value.Usage.InputTokens), CompletionTokens: int64(*ev.Value.Usage.OutputTokens), TotalTokens: int64(*ev.Value.Usage.TotalTokens)}
				}
			}
			if err := out.GetStream().Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := testTranslation().Stream(bytes.NewReader(answer), got.add(t), true); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got, cmp.AllowUnexported(streamSummary{})); d != "" {
				t.Errorf("stream (-sdk +ours):\n%s", d)
			}
		})
	}
}

// streamSummary is what a client reads from a stream: its text, each tool call (id, name, arguments), how it
// finished and its usage.
type streamSummary struct {
	text, finish string
	tools        []string
	usage        openai.ChatUsage
}

// add reads OpenAI chunks into s.
func (s *streamSummary) add(t *testing.T) func([]byte) error {
	return func(b []byte) error {
		var c openai.ChatChunk
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("chunk %s: %v", b, err)
		}
		if c.Usage != nil {
			s.usage = *c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				s.text += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.ID != "" {
					s.tools = append(s.tools, tc.ID+" "+tc.Function.Name+" ")
				}
				s.tools[*tc.Index] += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				s.finish = *ch.FinishReason
			}
		}
		return nil
	}
}
