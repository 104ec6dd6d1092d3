package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// upperTranslation is a provider wire made up for the test: its answer is a text that becomes OpenAI's content
// in upper case, its stream one line per chunk, and its errors a bare message.
type upperTranslation struct{}

func (upperTranslation) Answer(body []byte) ([]byte, Usage, error) {
	if bytes.HasPrefix(body, []byte("!")) {
		return nil, Usage{}, errors.New("not the wire")
	}
	return []byte(`{"content":"` + strings.ToUpper(string(body)) + `"}`), Usage{PromptTokens: 1, CompletionTokens: int64(len(body))}, nil
}

func (upperTranslation) Error(status int, body []byte) []byte {
	return ErrorEnvelope(string(body), "upstream_error", "x")
}

func (upperTranslation) Stream(r io.Reader, emit func([]byte) error, clientWantsUsage bool) (Usage, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return Usage{}, err
	}
	for line := range strings.Lines(string(b)) {
		if err := emit([]byte(`{"delta":"` + strings.ToUpper(strings.TrimSpace(line)) + `"}`)); err != nil {
			return Usage{}, err
		}
	}
	if clientWantsUsage {
		_ = emit([]byte(`{"choices":[]}`))
	}
	return Usage{PromptTokens: -4, CompletionTokens: 2}, nil
}

// signingDialect signs with the Secret's two entries.
type signingDialect struct{ testDialect }

func (signingDialect) Sign(req *http.Request, body []byte, secret map[string][]byte) error {
	req.Header.Set("X-Signed", string(secret["id"])+":"+string(secret["secret"])+":"+string(body))
	return nil
}

// TestForwardTranslates relays answers of another wire through a Translation: a whole answer, an error answer,
// a stream framed as OpenAI's events, and an answer not of the wire, which is the client's 502.
func TestForwardTranslates(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/error":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "4")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`slow down`))
		case "/stream":
			w.Header().Set("Content-Type", "application/x-lines")
			_, _ = w.Write([]byte("a\nb\n"))
		default:
			_, _ = w.Write(b)
		}
	}))
	defer srv.Close()
	c := New(Options{Timeout: time.Second})
	forward := func(path, body string, stream bool) (Result, *httptest.ResponseRecorder) {
		t.Helper()
		sink := httptest.NewRecorder()
		res, err := c.Forward(context.Background(), Request{Target: Target{URL: srv.URL + path}, Body: strings.NewReader(body),
			ContentLength: int64(len(body)), Stream: stream, StreamUsage: true, Usage: true, Dialect: testDialect{},
			Translation: upperTranslation{}}, sink)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return res, sink
	}
	res, sink := forward("/answer", "hello", false)
	if got := sink.Body.String(); got != `{"content":"HELLO"}` || res.Usage.Total() != 6 || !res.Complete || sink.Header().Get("Content-Type") != "application/json" {
		t.Errorf("answer: %q %+v %v", got, res, sink.Header())
	}
	res, sink = forward("/error", "", false)
	if got := sink.Body.String(); sink.Code != 429 || got != `{"error":{"message":"slow down","type":"upstream_error","code":"x"}}` || sink.Header().Get("Retry-After") != "4" {
		t.Errorf("error: %d %q %v", sink.Code, got, sink.Header())
	}
	res, sink = forward("/stream", "", true)
	want := "data: {\"delta\":\"A\"}\n\ndata: {\"delta\":\"B\"}\n\ndata: {\"choices\":[]}\n\ndata: [DONE]\n\n"
	if got := sink.Body.String(); got != want || sink.Header().Get("Content-Type") != "text/event-stream" || !res.Complete {
		t.Errorf("stream: %q %v", got, sink.Header())
	}
	if res.Usage.PromptTokens != 0 || res.Usage.CompletionTokens != 2 {
		t.Errorf("stream usage %+v: a negative count must read as zero", res.Usage)
	}
	res, sink = forward("/answer", "!garbage", false)
	if sink.Code != http.StatusBadGateway || res.Complete || !strings.Contains(sink.Body.String(), "not the wire") {
		t.Errorf("unreadable answer: %d %q", sink.Code, sink.Body.String())
	}
}

// TestForwardSigns signs a call with the whole data of its Secret, which goes only to a host the Secret lists.
func TestForwardSigns(t *testing.T) {
	signed := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		signed <- r.Header.Get("X-Signed")
		_, _ = w.Write([]byte("{}"))
	}))
	defer srv.Close()
	secret := func(name, hosts string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws",
			Labels:      map[string]string{gatewayv1.LabelUpstreamCredential: "true"},
			Annotations: map[string]string{gatewayv1.AnnotationUpstreamHosts: hosts}},
			Data: map[string][]byte{"id": []byte("AKID"), "secret": []byte("shh")}}
	}
	kube := fake.NewClientset(secret("aws", "127.0.0.1"), secret("elsewhere", "bedrock.example.com"))
	c := New(Options{Timeout: time.Second, Secrets: NewSecrets(kube, time.Minute)})
	call := func(name string) error {
		body := `{"a":1}`
		_, err := c.Forward(context.Background(), Request{Target: Target{URL: srv.URL, Namespace: "ws", Secret: &snapshot.SecretRef{Name: name}},
			Body: strings.NewReader(body), ContentLength: int64(len(body)), Payload: []byte(body), Dialect: signingDialect{}}, httptest.NewRecorder())
		return err
	}
	if err := call("aws"); err != nil {
		t.Fatal(err)
	}
	if got := <-signed; got != `AKID:shh:{"a":1}` {
		t.Errorf("signature header %q", got)
	}
	var ue *Error
	if err := call("elsewhere"); !errors.As(err, &ue) || ue.Kind != KindCredentials || !errors.Is(err, ErrHostNotAllowed) {
		t.Errorf("a Secret for another host: %v", err)
	}
}
