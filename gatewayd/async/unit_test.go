package async

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

func TestParseBody(t *testing.T) {
	for _, tc := range []struct {
		body  string
		field string // "" = accepted
		check func(Body) bool
	}{
		{`{"model_input": {"a": 1}}`, "", func(b Body) bool {
			return string(b.ModelInput) == `{"a": 1}` && b.Priority == 0 && b.MaxTimeInQueueSeconds == 600 &&
				b.Retry == queue.RetryConfig{MaxAttempts: 3, InitialDelayMs: 1000, MaxDelayMs: 5000} && b.WebhookEndpoint == ""
		}},
		{`{"model_input": "text", "priority": 2, "max_time_in_queue_seconds": 259200, "webhook_endpoint": "https://h.example.com",
		   "inference_retry_config": {"max_attempts": 10, "initial_delay_ms": 0, "max_delay_ms": 60000}}`, "", func(b Body) bool {
			return b.Priority == 2 && b.MaxTimeInQueueSeconds == 259200 && b.WebhookEndpoint == "https://h.example.com" &&
				b.Retry == queue.RetryConfig{MaxAttempts: 10, InitialDelayMs: 0, MaxDelayMs: 60000}
		}},
		{`{"model_input": 1, "inference_retry_config": {"max_attempts": 1}}`, "", func(b Body) bool {
			return b.Retry == queue.RetryConfig{MaxAttempts: 1, InitialDelayMs: 1000, MaxDelayMs: 5000}
		}},
		{`{"model_input": 1, "priority": null, "webhook_endpoint": null}`, "", func(b Body) bool { return b.Priority == 0 }},
		{`[]`, "body", nil},
		{`not json`, "body", nil},
		{`{}`, "model_input", nil},
		{`{"model_input": null}`, "model_input", nil},
		{`{"model_input": 1, "priority": 3}`, "priority", nil},
		{`{"model_input": 1, "priority": -1}`, "priority", nil},
		{`{"model_input": 1, "priority": 1.5}`, "priority", nil},
		{`{"model_input": 1, "priority": "1"}`, "priority", nil},
		{`{"model_input": 1, "max_time_in_queue_seconds": 9}`, "max_time_in_queue_seconds", nil},
		{`{"model_input": 1, "max_time_in_queue_seconds": 259201}`, "max_time_in_queue_seconds", nil},
		{`{"model_input": 1, "webhook_endpoint": 7}`, "webhook_endpoint", nil},
		{`{"model_input": 1, "inference_retry_config": 5}`, "inference_retry_config", nil},
		{`{"model_input": 1, "inference_retry_config": {"max_attempts": 0}}`, "inference_retry_config.max_attempts", nil},
		{`{"model_input": 1, "inference_retry_config": {"max_attempts": 11}}`, "inference_retry_config.max_attempts", nil},
		{`{"model_input": 1, "inference_retry_config": {"initial_delay_ms": 10001}}`, "inference_retry_config.initial_delay_ms", nil},
		{`{"model_input": 1, "inference_retry_config": {"max_delay_ms": 60001}}`, "inference_retry_config.max_delay_ms", nil},
		{`{"model_input": 1, "inference_retry_config": {"max_delay_ms": -1}}`, "inference_retry_config.max_delay_ms", nil},
		{`{"model_input": 1, "inference_retry_config": {"retries": 2}}`, "inference_retry_config.retries", nil},
		{`{"model_input": 1, "prority": 2}`, "prority", nil},
	} {
		b, err := ParseBody([]byte(tc.body))
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: refused: %+v", tc.body, err)
		case tc.field == "" && !tc.check(b):
			t.Errorf("%s: parsed as %+v", tc.body, b)
		case tc.field != "" && (err == nil || err.Field != tc.field):
			t.Errorf("%s: got %+v, want a refusal of %s", tc.body, err, tc.field)
		case tc.field != "" && err.Message == "":
			t.Errorf("%s: refusal without a rule", tc.body)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status int
		err    error
		want   verdict
		code   string
	}{
		{200, nil, succeed, ""},
		{204, nil, succeed, ""},
		{400, nil, fail, queue.CodeInvalidInput},
		{422, nil, fail, queue.CodeInvalidInput},
		{429, nil, requeue, queue.CodeUnavailable},
		{500, nil, retry, queue.CodePredictError},
		{502, nil, retry, queue.CodePredictError},
		{503, nil, retry, queue.CodePredictError},
		{504, nil, retry, queue.CodePredictError},
		{501, nil, fail, queue.CodePredictError},
		{0, &upstream.Error{Kind: upstream.KindStatus, Status: 502}, retry, queue.CodePredictError},
		{0, &upstream.Error{Kind: upstream.KindStatus, Status: 404}, fail, queue.CodeInvalidInput},
		{0, &upstream.Error{Kind: upstream.KindTimeout, Timeout: time.Second}, fail, queue.CodePredictTimeout},
		{0, &upstream.Error{Kind: upstream.KindUnavailable, Err: errors.New("refused")}, retry, queue.CodeUnavailable},
		{0, &upstream.Error{Kind: upstream.KindCredentials, Err: errors.New("no secret")}, fail, queue.CodeInternalError},
		{0, &upstream.Error{Kind: upstream.KindCanceled, Err: errors.New("stop")}, requeue, ""},
	} {
		v, e := classify(tc.status, tc.err)
		if v != tc.want || e.Code != tc.code {
			t.Errorf("classify(%d, %v) = %v %q, want %v %q", tc.status, tc.err, v, e.Code, tc.want, tc.code)
		}
		if e.Code != "" && !strings.HasSuffix(e.Message, ".") {
			t.Errorf("classify(%d, %v): message %q is not a sentence", tc.status, tc.err, e.Message)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	rc := queue.RetryConfig{MaxAttempts: 10, InitialDelayMs: 1000, MaxDelayMs: 5000}
	var got []time.Duration
	for n := 1; n <= 5; n++ {
		got = append(got, retryDelay(rc, n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	if d := retryDelay(queue.RetryConfig{InitialDelayMs: 0, MaxDelayMs: 5000}, 4); d != 0 {
		t.Fatalf("zero initial delay: %v", d)
	}
	if d := retryDelay(queue.RetryConfig{InitialDelayMs: 3000, MaxDelayMs: 0}, 1); d != 0 {
		t.Fatalf("max 0 caps every delay: %v", d)
	}
}

// FuzzParseBody: no body panics the parser, an accepted body is within every range, and a refusal names a field
// and a rule.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{`{"model_input": 1}`, `{"model_input": {"a": [1]}, "priority": 2, "inference_retry_config": {"max_attempts": 10}}`,
		`{"model_input": null}`, `[]`, `{"priority": 1e400}`, `{"model_input": 1, "priority": -0}`, `{"model_input": 1, "inference_retry_config": null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		body, err := ParseBody(b)
		if err != nil {
			if err.Field == "" || err.Message == "" {
				t.Fatalf("refusal without field or rule: %+v", err)
			}
			return
		}
		if len(body.ModelInput) == 0 || body.Priority < 0 || body.Priority > 2 || body.MaxTimeInQueueSeconds < 10 || body.MaxTimeInQueueSeconds > 259200 ||
			body.Retry.MaxAttempts < 1 || body.Retry.MaxAttempts > 10 || body.Retry.InitialDelayMs < 0 || body.Retry.InitialDelayMs > 10000 ||
			body.Retry.MaxDelayMs < 0 || body.Retry.MaxDelayMs > 60000 {
			t.Fatalf("accepted out of range: %+v from %q", body, b)
		}
	})
}
