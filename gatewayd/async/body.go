package async

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// Body limits and defaults of async_predict (docs/rest-api.md "Async inference").
const (
	MaxBodyBytes = 256 << 10

	DefaultPriority              = 0
	DefaultMaxTimeInQueueSeconds = 600
	DefaultMaxAttempts           = 3
	DefaultInitialDelayMs        = 1000
	DefaultMaxDelayMs            = 5000
)

// intRange is an integer field's allowed range.
type intRange struct{ min, max int64 }

var (
	rangePriority       = intRange{0, 2}
	rangeMaxTimeInQueue = intRange{10, 259200}
	rangeMaxAttempts    = intRange{1, 10}
	rangeInitialDelayMs = intRange{0, 10000}
	rangeMaxDelayMs     = intRange{0, 60000}
)

// Body is a validated async_predict body, defaults applied.
type Body struct {
	ModelInput            json.RawMessage
	WebhookEndpoint       string
	Priority              int
	MaxTimeInQueueSeconds int64
	Retry                 queue.RetryConfig
}

func fieldError(field, msg string) *httperr.FieldError {
	return &httperr.FieldError{Field: field, Message: msg}
}

// ParseBody decodes and checks an async_predict body: a JSON object with model_input (required, any JSON value
// but null), and the optional webhook_endpoint, priority, max_time_in_queue_seconds and inference_retry_config,
// each in its range. Unknown fields are refused, so a misspelt option is not silently ignored. The refusal names
// the field and the rule. The webhook URL's target is checked by the caller (netguard).
func ParseBody(b []byte) (Body, *httperr.FieldError) {
	out := Body{Priority: DefaultPriority, MaxTimeInQueueSeconds: DefaultMaxTimeInQueueSeconds,
		Retry: queue.RetryConfig{MaxAttempts: DefaultMaxAttempts, InitialDelayMs: DefaultInitialDelayMs, MaxDelayMs: DefaultMaxDelayMs}}
	fields, ferr := object(b, "body")
	if ferr != nil {
		return out, ferr
	}
	if err := unknown(fields, "", "model_input", "webhook_endpoint", "priority", "max_time_in_queue_seconds", "inference_retry_config"); err != nil {
		return out, err
	}
	in, ok := fields["model_input"]
	if !ok || isNull(in) {
		return out, fieldError("model_input", "is required: the JSON value sent to the model's predict path")
	}
	out.ModelInput = bytes.TrimSpace(in)
	if v, ok := fields["webhook_endpoint"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &out.WebhookEndpoint); err != nil {
			return out, fieldError("webhook_endpoint", "must be a string (an https URL)")
		}
	}
	var err *httperr.FieldError
	var n int64
	if n, err = integer(fields, "priority", "priority", rangePriority, DefaultPriority); err != nil {
		return out, err
	}
	out.Priority = int(n)
	if out.MaxTimeInQueueSeconds, err = integer(fields, "max_time_in_queue_seconds", "max_time_in_queue_seconds", rangeMaxTimeInQueue, DefaultMaxTimeInQueueSeconds); err != nil {
		return out, err
	}
	if v, ok := fields["inference_retry_config"]; ok && !isNull(v) {
		rc, err := object(v, "inference_retry_config")
		if err != nil {
			return out, err
		}
		const p = "inference_retry_config."
		if err := unknown(rc, p, "max_attempts", "initial_delay_ms", "max_delay_ms"); err != nil {
			return out, err
		}
		if n, err = integer(rc, "max_attempts", p+"max_attempts", rangeMaxAttempts, DefaultMaxAttempts); err != nil {
			return out, err
		}
		out.Retry.MaxAttempts = int(n)
		if out.Retry.InitialDelayMs, err = integer(rc, "initial_delay_ms", p+"initial_delay_ms", rangeInitialDelayMs, DefaultInitialDelayMs); err != nil {
			return out, err
		}
		if out.Retry.MaxDelayMs, err = integer(rc, "max_delay_ms", p+"max_delay_ms", rangeMaxDelayMs, DefaultMaxDelayMs); err != nil {
			return out, err
		}
	}
	return out, nil
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

func object(b []byte, what string) (map[string]json.RawMessage, *httperr.FieldError) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, fieldError(what, "must be a JSON object")
	}
	return m, nil
}

func unknown(m map[string]json.RawMessage, prefix string, known ...string) *httperr.FieldError {
	var extra []string
outer:
	for k := range m {
		for _, n := range known {
			if k == n {
				continue outer
			}
		}
		extra = append(extra, k)
	}
	if len(extra) == 0 {
		return nil
	}
	sort.Strings(extra)
	name := extra[0]
	if name == "" {
		name = `""` // an empty key still needs a name in the refusal
	}
	return fieldError(prefix+name, "is not a field of this body")
}

// integer reads an optional integer field in r, def when absent or null.
func integer(m map[string]json.RawMessage, key, field string, r intRange, def int64) (int64, *httperr.FieldError) {
	v, ok := m[key]
	if !ok || isNull(v) {
		return def, nil
	}
	rangeMsg := fmt.Sprintf("must be an integer from %d to %d", r.min, r.max)
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || f != math.Trunc(f) {
		return 0, fieldError(field, rangeMsg)
	}
	if f < float64(r.min) || f > float64(r.max) {
		return 0, fieldError(field, rangeMsg)
	}
	return int64(f), nil
}
