package upstream

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

// Translation turns one try's answer from a provider's wire into OpenAI's, the one form gatewayd answers in
// (docs/decisions.md "OpenAI's shape inside gatewayd"). Forward uses it when Request.Translation is set: only the
// providers that speak another wire set it; with it nil, Forward relays the answer as it is.
type Translation interface {
	// Answer translates a whole 2xx answer body: OpenAI's body and the usage it reports.
	Answer(body []byte) ([]byte, Usage, error)
	// Error translates an error answer into OpenAI's error envelope {"error":{"message","type","code"}}: the
	// provider's message is kept, a credential never.
	Error(status int, body []byte) []byte
	// Stream reads the provider's streamed answer from r and calls emit with the JSON of each OpenAI chunk as it
	// goes, never buffering the whole answer; Forward frames each as a server-sent event ("data: ...") and ends
	// the stream with "data: [DONE]" when Stream returns nil. It returns the usage found, even with an error.
	// clientWantsUsage: emit a final usage chunk (choices: []) only when true.
	Stream(r io.Reader, emit func(chunk []byte) error, clientWantsUsage bool) (Usage, error)
}

// Signer is a Dialect that signs the whole request (AWS SigV4, say) from the data of the target's Secret, instead
// of putting one key on it: Forward calls Sign in place of Authorize, once every header is set.
type Signer interface {
	Sign(req *http.Request, body []byte, secret map[string][]byte) error
}

// maxTranslatedAnswer bounds a non-streamed answer read whole to be translated.
const maxTranslatedAnswer = 16 << 20

var (
	eventData = []byte("data: ")
	eventEnd  = []byte("\n\n")
	doneEvent = []byte("data: [DONE]\n\n")
)

// translate relays resp, a provider's answer, into sink through tr: as a stream of OpenAI's events when the
// client asked for one (and for the usage chunk when streamUsage), else whole.
func translate(tr Translation, stream, streamUsage bool, resp *http.Response, sink Sink, d *deadline) Result {
	res := Result{Status: resp.StatusCode}
	h := sink.Header()
	if resp.StatusCode < 400 && stream {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		sink.WriteHeader(resp.StatusCode)
		sink.Flush()
		var event []byte
		emit := func(chunk []byte) error {
			d.reset()
			event = append(append(append(event[:0], eventData...), chunk...), eventEnd...)
			if _, err := sink.Write(event); err != nil {
				return err
			}
			sink.Flush()
			return nil
		}
		u, err := tr.Stream(resp.Body, emit, streamUsage)
		res.Usage = nonNegative(u)
		if err == nil {
			if _, err = sink.Write(doneEvent); err == nil {
				sink.Flush()
			}
		}
		res.Complete = err == nil
		return res
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTranslatedAnswer))
	var out []byte
	switch {
	case resp.StatusCode >= 400:
		CopyRetryHeaders(h, resp.Header)
		out = tr.Error(resp.StatusCode, body)
	case err == nil:
		var u Usage
		out, u, err = tr.Answer(body)
		res.Usage = nonNegative(u)
		if err != nil {
			// A 2xx answer that is not the provider's shape: the client learns it, in OpenAI's envelope.
			res.Status = http.StatusBadGateway
			out = ErrorEnvelope("The upstream's answer could not be read: "+err.Error(), "upstream_error", "model_unavailable")
		}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(out)))
	sink.WriteHeader(res.Status)
	_, werr := sink.Write(out)
	res.Complete = err == nil && werr == nil
	return res
}

// nonNegative is u with no negative count: an upstream's usage never credits a caller.
func nonNegative(u Usage) Usage {
	u.PromptTokens, u.CompletionTokens, u.TotalTokens = max(u.PromptTokens, 0), max(u.CompletionTokens, 0), max(u.TotalTokens, 0)
	return u
}

// ErrorEnvelope is OpenAI's error body {"error":{"message","type","code"}}, which a Translation's Error answers.
func ErrorEnvelope(message, typ, code string) []byte {
	type inner struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	}
	b, _ := json.Marshal(struct {
		Error inner `json:"error"`
	}{inner{message, typ, code}})
	return b
}
