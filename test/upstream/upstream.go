// Package upstream is a fake OpenAI-compatible upstream for tests and the local stack. It serves chat
// completions (plain and SSE streaming), completions, embeddings and a predict route on a loopback port,
// reports deterministic usage (prompt tokens = words of the input, completion tokens as configured), and records
// every request it receives so tests can assert on the forwarded headers and body.
package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options shape the fake's answers. The zero value is usable.
type Options struct {
	// CompletionTokens is the completion token count every answer reports; 0 means 5.
	CompletionTokens int
	// StreamDeltas is the number of content chunks of a streamed answer; 0 means 3.
	StreamDeltas int
	// StreamDelay is slept before each streamed chunk.
	StreamDelay time.Duration
	// Gate, when set, is received from before each streamed content chunk, so a test decides when each leaves.
	Gate <-chan struct{}
	// Delay holds every answer back, for timeout tests. A cancelled request stops waiting.
	Delay time.Duration
	// StampChunks adds StampField to every streamed chunk: the wall clock in Unix nanoseconds just before the
	// chunk is written. A client in the same process subtracts it to tell delay added on the way from the
	// upstream's own pacing.
	StampChunks bool
}

// StampField is the chunk field StampChunks adds.
const StampField = "x_sent_unix_nano"

// Request is one request the fake received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// Server is a running fake upstream.
type Server struct {
	// URL is the server's root, for example http://127.0.0.1:34567.
	URL string

	opts      Options
	srv       *httptest.Server
	mu        sync.Mutex
	reqs      []Request
	cancelled int
}

// New starts a fake upstream on a loopback port. Close it when done.
func New(opts Options) *Server {
	if opts.CompletionTokens == 0 {
		opts.CompletionTokens = 5
	}
	if opts.StreamDeltas == 0 {
		opts.StreamDeltas = 3
	}
	s := &Server{opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.completion("chat.completion"))
	mux.HandleFunc("POST /v1/completions", s.completion("text_completion"))
	mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	mux.HandleFunc("POST /predict", s.predict)
	mux.HandleFunc("POST /v1/predict", s.predict)
	s.srv = httptest.NewServer(s.record(mux))
	s.URL = s.srv.URL
	return s
}

// BaseURL is the OpenAI-style base address, URL + "/v1", as an Endpoint target names it.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Handler is the fake's handler, to serve it on a listener of the caller's (inside a network namespace, say).
func (s *Server) Handler() http.Handler { return s.srv.Config.Handler }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Requests returns a copy of every request received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Last returns the newest request, false when none came.
func (s *Server) Last() (Request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return Request{}, false
	}
	return s.reqs[len(s.reqs)-1], true
}

// Cancelled is how many requests ended because the caller went away before the answer was complete.
func (s *Server) Cancelled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

func (s *Server) noteCancelled() {
	s.mu.Lock()
	s.cancelled++
	s.mu.Unlock()
}

// Reset forgets the recorded requests.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = nil
}

func (s *Server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		if s.opts.Delay > 0 {
			select {
			case <-time.After(s.opts.Delay):
			case <-r.Context().Done():
				s.noteCancelled()
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Usage is the usage object of an answer.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type request struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	Messages      []message       `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	Input         json.RawMessage `json:"input"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type message struct {
	Content json.RawMessage `json:"content"`
}

// Words counts the whitespace-separated words of a JSON string, array of strings or array of content parts.
// It is the fake's prompt token count.
func Words(raw json.RawMessage) int {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return len(strings.Fields(s))
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		n := 0
		for _, item := range list {
			var part struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(item, &part) == nil && part.Text != "" {
				n += len(strings.Fields(part.Text))
				continue
			}
			n += Words(item)
		}
		return n
	}
	return 0
}

func (r *request) promptTokens() int {
	n := Words(r.Prompt) + Words(r.Input)
	for _, m := range r.Messages {
		n += Words(m.Content)
	}
	return n
}

// failStatus lets a test ask for an upstream error: model "status-503" answers 503.
func failStatus(model string) int {
	if code, ok := strings.CutPrefix(model, "status-"); ok {
		if n, err := strconv.Atoi(code); err == nil && n >= 400 && n < 600 {
			return n
		}
	}
	return 0
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) completion(object string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": err.Error(), "type": "invalid_request_error"}})
			return
		}
		if code := failStatus(req.Model); code != 0 {
			writeJSON(w, code, map[string]any{"error": map[string]any{"message": fmt.Sprintf("fake upstream failure %d", code), "type": "server_error", "code": code}})
			return
		}
		usage := Usage{PromptTokens: req.promptTokens(), CompletionTokens: s.opts.CompletionTokens}
		usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
		if req.Stream {
			s.stream(w, r, object+".chunk", req, usage)
			return
		}
		text := strings.Repeat("tok ", s.opts.StreamDeltas)
		choice := map[string]any{"index": 0, "finish_reason": "stop"}
		if object == "chat.completion" {
			choice["message"] = map[string]any{"role": "assistant", "content": text}
		} else {
			choice["text"] = text
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "cmpl-fake", "object": object, "created": 1700000000, "model": req.Model,
			"choices": []any{choice}, "usage": usage,
		})
	}
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, object string, req request, usage Usage) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	// Send the headers at once, as real SSE servers do, so the client sees the stream open before any chunk.
	if flusher != nil {
		flusher.Flush()
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	send := func(v map[string]any) {
		v["id"], v["object"], v["created"], v["model"] = "cmpl-fake", object, 1700000000, req.Model
		if includeUsage {
			if _, ok := v["usage"]; !ok {
				v["usage"] = nil
			}
		}
		if s.opts.StampChunks {
			v[StampField] = time.Now().UnixNano()
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	for i := range s.opts.StreamDeltas {
		if s.opts.Gate != nil {
			select {
			case <-s.opts.Gate:
			case <-r.Context().Done():
				s.noteCancelled()
				return
			}
		}
		if s.opts.StreamDelay > 0 {
			time.Sleep(s.opts.StreamDelay)
		}
		content := fmt.Sprintf("tok%d ", i)
		choice := map[string]any{"index": 0, "finish_reason": nil}
		if object == "chat.completion.chunk" {
			choice["delta"] = map[string]any{"content": content}
		} else {
			choice["text"] = content
		}
		send(map[string]any{"choices": []any{choice}})
	}
	last := map[string]any{"index": 0, "finish_reason": "stop"}
	if object == "chat.completion.chunk" {
		last["delta"] = map[string]any{}
	} else {
		last["text"] = ""
	}
	send(map[string]any{"choices": []any{last}})
	if includeUsage {
		send(map[string]any{"choices": []any{}, "usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": err.Error()}})
		return
	}
	if code := failStatus(req.Model); code != 0 {
		writeJSON(w, code, map[string]any{"error": map[string]any{"message": fmt.Sprintf("fake upstream failure %d", code)}})
		return
	}
	n := req.promptTokens()
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "model": req.Model,
		"data":  []any{map[string]any{"object": "embedding", "index": 0, "embedding": []float64{0.1, 0.2, 0.3}}},
		"usage": map[string]int{"prompt_tokens": n, "total_tokens": n},
	})
}

// predict echoes the body with its content type, so a test can check it arrived unchanged.
func (s *Server) predict(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if ct := r.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.Header().Set("X-Fake-Upstream", "predict")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
