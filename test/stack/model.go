package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// MaxDemoModelBody bounds a predict body of the demo model, so a stray upload cannot fill its memory.
const MaxDemoModelBody = 32 << 20

// Words the demo model's toy sentiment counts. Small on purpose: the answers must be easy to predict by hand.
var (
	positiveWords = map[string]bool{"love": true, "great": true, "good": true, "excellent": true, "happy": true, "nice": true, "like": true, "best": true}
	negativeWords = map[string]bool{"hate": true, "bad": true, "terrible": true, "awful": true, "sad": true, "poor": true, "worst": true, "broken": true}
)

// Prediction is the demo model's answer to a JSON predict call.
type Prediction struct {
	// Label is "positive" or "negative".
	Label string `json:"label"`
	// Score is the probability of Label, in [0.5, 1).
	Score float64 `json:"score"`
	// Deployment is the name the server was started with, so a caller sees which deployment answered.
	Deployment string `json:"deployment"`
	// Host is the serving host's name, only when the call asked for it ("report_host").
	Host string `json:"host,omitempty"`
}

// Predict is the demo model itself: a toy sentiment that counts known positive and negative words in text.
// With p positive and n negative words, the probability of "positive" is (p+1)/(p+n+2); a tie is positive.
func Predict(text, deployment string) Prediction {
	var pos, neg int
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !('a' <= r && r <= 'z' || r == '\'')
	}) {
		switch {
		case positiveWords[w]:
			pos++
		case negativeWords[w]:
			neg++
		}
	}
	p := float64(pos+1) / float64(pos+neg+2)
	out := Prediction{Label: "positive", Score: p, Deployment: deployment}
	if p < 0.5 {
		out.Label, out.Score = "negative", 1-p
	}
	out.Score = math.Round(out.Score*1e4) / 1e4
	return out
}

// NewDemoModel returns the handler of the demo model server, which answers as deployment name:
//
//   - GET /health answers 200 "ok" (the default readinessPath of a ModelDeployment);
//   - POST /predict with a JSON body {"text": "..."} answers a Prediction;
//   - POST /predict with any other Content-Type answers the body unchanged, with the same Content-Type, so a
//     caller can check that octet-stream and multipart bodies pass through the gateway byte for byte;
//   - a JSON body may also drive the server, for tests of what a gateway does with a slow or failing model:
//     "delay_ms" answers that many milliseconds later (a call cancelled meanwhile ends at once), and
//     "fail_status" answers that HTTP status with an error body instead of a prediction, and "report_host"
//     adds the serving host's name to the prediction ("host"), so a caller sees which replica answered.
func NewDemoModel(name string) http.Handler {
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	})
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxDemoModelBody))
		if err != nil {
			code := http.StatusBadRequest
			if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
				code = http.StatusRequestEntityTooLarge
			}
			demoModelError(w, code, fmt.Sprintf("The body could not be read: %v.", err))
			return
		}
		ct := r.Header.Get("Content-Type")
		if !isJSON(ct) {
			if ct == "" {
				ct = "application/octet-stream"
			}
			w.Header().Set("Content-Type", ct)
			_, _ = w.Write(body)
			return
		}
		var in struct {
			Text       *string `json:"text"`
			DelayMS    int     `json:"delay_ms"`
			FailStatus int     `json:"fail_status"`
			ReportHost bool    `json:"report_host"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			demoModelError(w, http.StatusBadRequest, fmt.Sprintf("The body is not a JSON object: %v.", err))
			return
		}
		if in.DelayMS > 0 {
			select {
			case <-time.After(time.Duration(in.DelayMS) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		if in.FailStatus >= 400 && in.FailStatus <= 599 {
			demoModelError(w, in.FailStatus, fmt.Sprintf("Failed on request (fail_status %d).", in.FailStatus))
			return
		}
		if in.Text == nil {
			demoModelError(w, http.StatusBadRequest, `The body must be a JSON object with a string "text", for example {"text": "I love it"}.`)
			return
		}
		out := Predict(*in.Text, name)
		if in.ReportHost {
			out.Host = host
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}

// isJSON reports whether a Content-Type is application/json or a +json type.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

func demoModelError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// StartDemoModel serves NewDemoModel(name) on addr (a port of 0 picks a free one) and returns its base URL and a
// function that stops it.
func StartDemoModel(addr, name string) (baseURL string, stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("failed to listen on %s for the demo model: %w", addr, err)
	}
	baseURL, stop = ServeDemoModel(l, name)
	return baseURL, stop, nil
}

// ServeDemoModel serves the demo model on l (which it closes on stop) and answers its base URL.
func ServeDemoModel(l net.Listener, name string) (baseURL string, stop func()) {
	srv := &http.Server{Handler: NewDemoModel(name), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }() // returns http.ErrServerClosed on stop
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return "http://" + l.Addr().String(), stop
}

// startModel starts the demo model server that the seeded ModelDeployment points at.
func (s *Stack) startModel(addr string) error {
	baseURL, stop, err := StartDemoModel(addr, ModelDeploymentName)
	if err != nil {
		return err
	}
	s.ModelURL, s.stopModel = baseURL, stop
	return nil
}
