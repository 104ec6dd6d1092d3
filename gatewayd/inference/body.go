package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// inferenceRequest is the part of an OpenAI request body gatewayd reads.
type inferenceRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (r *inferenceRequest) wantsUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

var includeUsage = []byte(`{"include_usage":true}`)

// rewriteBody returns the body to forward: unchanged, except that "model" becomes targetModel when one is set
// and, for streams, stream_options.include_usage is forced on so tokens can be counted. Top-level members keep
// their order and values byte for byte; only the whitespace between them may change.
func rewriteBody(body []byte, targetModel string, stream bool) ([]byte, error) {
	if targetModel == "" && !stream {
		return body, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("body must be a JSON object")
	}
	out := make([]byte, 0, len(body)+32)
	out = append(out, '{')
	sawOptions := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("invalid JSON body: %w", err)
		}
		name := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("invalid JSON body at %q: %w", name, err)
		}
		switch {
		case name == "model" && targetModel != "":
			raw, _ = json.Marshal(targetModel)
		case name == "stream_options" && stream:
			sawOptions = true
			if raw, err = forceIncludeUsage(raw); err != nil {
				return nil, err
			}
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		key, _ := json.Marshal(name)
		out = append(append(append(out, key...), ':'), raw...)
	}
	if stream && !sawOptions {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(out, `"stream_options":`...), includeUsage...)
	}
	return append(out, '}'), nil
}

func forceIncludeUsage(raw json.RawMessage) (json.RawMessage, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return includeUsage, nil
	}
	var opts map[string]json.RawMessage
	if err := json.Unmarshal(raw, &opts); err != nil {
		return nil, errors.New("stream_options must be an object")
	}
	opts["include_usage"] = json.RawMessage("true")
	return json.Marshal(opts)
}
