package openai

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Request is the part of an OpenAI request body gatewayd reads.
type Request struct {
	Model         string
	Stream        bool
	StreamOptions *streamOptions
}

type streamOptions struct {
	IncludeUsage bool
}

// WantsUsage: the client asked for the stream's usage chunk.
func (r *Request) WantsUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

// ParseRequest reads the members gatewayd acts on (model, stream, stream_options.include_usage) the way every
// upstream does, or refuses the body. Names are matched exactly, and a body that names one of those members
// twice, or in another case ("Model", "STREAM"), is refused: upstreams differ on which duplicate wins and on case,
// and gatewayd must charge, limit and allow exactly the call the upstream will run. Other members are passed
// through unread, whatever their depth or numbers, but the body as a whole must be one valid JSON object (no
// duplicate names at any depth, valid UTF-8).
func ParseRequest(body []byte) (Request, error) {
	var req Request
	err := eachMember(body, "", func(name string, value jsontext.Value) error {
		var err error
		switch name {
		case "model":
			err = json.Unmarshal(value, &req.Model)
		case "stream":
			err = json.Unmarshal(value, &req.Stream)
		case "stream_options":
			if value.Kind() == 'n' {
				return nil
			}
			req.StreamOptions = &streamOptions{}
			err = eachMember(value, "stream_options.", func(name string, value jsontext.Value) error {
				if name == "include_usage" {
					return wrapField("stream_options.include_usage", json.Unmarshal(value, &req.StreamOptions.IncludeUsage))
				}
				return nil
			}, "include_usage")
		}
		return wrapField(name, err)
	}, "model", "stream", "stream_options")
	return req, err
}

// eachMember calls fn with each member of the JSON object obj. A member whose name differs only in case from one
// of actedOn is refused, and so is any duplicate name at any depth (jsontext's default).
func eachMember(obj []byte, path string, fn func(name string, value jsontext.Value) error, actedOn ...string) error {
	dec := jsontext.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return errors.New("body must be a JSON object")
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return fmt.Errorf("invalid JSON body: %w", err)
		}
		name := tok.String()
		value, err := dec.ReadValue()
		if err != nil {
			return fmt.Errorf("invalid JSON body at %s%s: %w", path, name, err)
		}
		for _, want := range actedOn {
			if name != want && strings.EqualFold(name, want) {
				return fmt.Errorf("%s%s: a case variant of %q is refused; send %q exactly once", path, name, want, want)
			}
		}
		if err := fn(name, value); err != nil {
			return err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return errors.New("invalid JSON body: data after the object")
	}
	return nil
}

func wrapField(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

// RewriteBody returns the body to forward: unchanged, except that "model" becomes targetModel when one is set
// and, for streams, stream_options.include_usage is forced on so tokens can be counted. Top-level members keep
// their order and values byte for byte; only the whitespace between them may change. The body must have passed
// parseRequest, so there is one "model" and one "stream_options" to rewrite.
func RewriteBody(body []byte, targetModel string, stream bool) ([]byte, error) {
	if targetModel == "" && !stream {
		return body, nil
	}
	out := make([]byte, 0, len(body)+32)
	out = append(out, '{')
	sawOptions := false
	err := eachMember(body, "", func(name string, raw jsontext.Value) error {
		var err error
		switch {
		case name == "model" && targetModel != "":
			if raw, err = json.Marshal(targetModel); err != nil {
				return err
			}
		case name == "stream_options" && stream:
			sawOptions = true
			if raw, err = forceIncludeUsage(raw); err != nil {
				return err
			}
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		if out, err = jsontext.AppendQuote(out, name); err != nil {
			return err
		}
		out = append(append(out, ':'), raw...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if stream && !sawOptions {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(out, `"stream_options":`...), includeUsage...)
	}
	return append(out, '}'), nil
}

var includeUsage = []byte(`{"include_usage":true}`)

func forceIncludeUsage(raw jsontext.Value) (jsontext.Value, error) {
	if raw.Kind() == 'n' {
		return includeUsage, nil
	}
	var opts map[string]jsontext.Value
	if err := json.Unmarshal(raw, &opts); err != nil {
		return nil, errors.New("stream_options must be an object")
	}
	opts["include_usage"] = jsontext.Value("true")
	return json.Marshal(opts, json.Deterministic(true))
}
