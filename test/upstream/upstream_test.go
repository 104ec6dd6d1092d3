package upstream

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer up-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestUsageIsDeterministic(t *testing.T) {
	s := New(Options{CompletionTokens: 9})
	defer s.Close()
	for path, body := range map[string]string{
		"/chat/completions": `{"model":"m","messages":[{"role":"user","content":"one two"},{"role":"user","content":[{"type":"text","text":"three"}]}]}`,
		"/completions":      `{"model":"m","prompt":["one two","three"]}`,
		"/embeddings":       `{"model":"m","input":"one two three"}`,
	} {
		resp, out := post(t, s.BaseURL()+path, body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
		var got struct{ Usage Usage }
		_ = json.Unmarshal([]byte(out), &got)
		wantCompletion := 9
		if path == "/embeddings" {
			wantCompletion = 0
		}
		if got.Usage.PromptTokens != 3 || got.Usage.CompletionTokens != wantCompletion {
			t.Errorf("%s: usage %+v", path, got.Usage)
		}
	}
	last, _ := s.Last()
	if last.Header.Get("Authorization") != "Bearer up-key" || len(s.Requests()) != 3 {
		t.Errorf("requests not recorded: %+v", last)
	}
}

func TestStreamUsageChunkOnlyWhenAsked(t *testing.T) {
	s := New(Options{StreamDeltas: 2})
	defer s.Close()
	for _, ask := range []bool{false, true} {
		body := `{"model":"m","stream":true,"messages":[{"content":"a b"}]`
		if ask {
			body += `,"stream_options":{"include_usage":true}`
		}
		resp, out := post(t, s.BaseURL()+"/chat/completions", body+"}")
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("content type %q", ct)
		}
		if strings.Count(out, "data: ") != 4+boolInt(ask) || !strings.HasSuffix(out, "data: [DONE]\n\n") {
			t.Errorf("ask=%v: stream %q", ask, out)
		}
		if strings.Contains(out, `"prompt_tokens":2`) != ask {
			t.Errorf("ask=%v: usage chunk presence wrong: %q", ask, out)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestFailStatus(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	resp, out := post(t, s.BaseURL()+"/chat/completions", `{"model":"status-429"}`)
	if resp.StatusCode != 429 || !strings.Contains(out, "fake upstream failure 429") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
}
