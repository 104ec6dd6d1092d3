package openai

import (
	"bytes"
	"encoding/json"

	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// Usage is the token counts of an answer, as Forward reports them.
type Usage = upstream.Usage

// wireUsage is OpenAI's usage object.
type wireUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// usageOf reads the usage of a JSON response or stream chunk, and whether the chunk carries no choice (the
// final usage chunk of a stream). It reads as encoding/json's Unmarshal into {choices, usage} does, and is read
// on every call: a document in the shape upstreams write (each name once, in its exact case, integer token
// counts) is read by scanUsage without allocating, anything else by usageOfJSON. Both give the same answer for
// every document (FuzzUsage).
func usageOf(b []byte) (u Usage, ok, noChoices bool) {
	if !json.Valid(b) {
		return Usage{}, false, false
	}
	if u, ok, noChoices, plain := scanUsage(b); plain {
		return u, ok, noChoices
	}
	return usageOfJSON(b)
}

// usageOfJSON is usageOf with encoding/json's Unmarshal.
func usageOfJSON(b []byte) (u Usage, ok, noChoices bool) {
	var v struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *wireUsage        `json:"usage"`
	}
	if json.Unmarshal(b, &v) != nil || v.Usage == nil {
		return Usage{}, false, false
	}
	return Usage(*v.Usage), true, len(v.Choices) == 0
}

// scanUsage reads the usage of a valid JSON document whose top level is an object in which "choices" and
// "usage" appear at most once each, in that exact case, "choices" as null or an array, and "usage" as null or an
// object whose members "prompt_tokens", "completion_tokens" and "total_tokens" appear at most once each as
// integers that fit an int64; plain is false for any other document, which scanUsage does not read.
func scanUsage(b []byte) (u Usage, ok, noChoices, plain bool) {
	s := scanner{b: b}
	s.space()
	if !s.take('{') {
		return Usage{}, false, false, false
	}
	sawChoices, sawUsage, choices := false, false, 0
	for s.space(); !s.take('}'); s.space() {
		s.take(',')
		s.space()
		name, simple := s.name()
		if !simple {
			return Usage{}, false, false, false
		}
		switch {
		case string(name) == "choices":
			if sawChoices {
				return Usage{}, false, false, false
			}
			sawChoices = true
			n, isArray := s.arrayLen()
			if !isArray && !s.null() {
				return Usage{}, false, false, false
			}
			choices = n
		case string(name) == "usage":
			if sawUsage {
				return Usage{}, false, false, false
			}
			sawUsage = true
			if s.null() {
				continue
			}
			if u, plain = s.usage(); !plain {
				return Usage{}, false, false, false
			}
			ok = true
		case bytes.EqualFold(name, []byte("choices")), bytes.EqualFold(name, []byte("usage")):
			// encoding/json matches names without regard to case.
			return Usage{}, false, false, false
		default:
			s.skip()
		}
	}
	if !ok {
		return Usage{}, false, false, true
	}
	return u, true, choices == 0, true
}

// scanner walks a document that json.Valid accepted, so it only tells values apart and never checks them.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// take consumes c when it comes next.
func (s *scanner) take(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// null consumes a null when it comes next.
func (s *scanner) null() bool {
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

// name reads a member's name and the colon after it; simple is false for a name with an escape, which is
// compared only after decoding.
func (s *scanner) name() (name []byte, simple bool) {
	start := s.i + 1
	s.skipString()
	name = s.b[start : s.i-1]
	s.space()
	s.take(':')
	s.space()
	return name, bytes.IndexByte(name, '\\') < 0
}

// skipString moves past the string that starts at s.i.
func (s *scanner) skipString() {
	for s.i++; s.b[s.i] != '"'; s.i++ {
		if s.b[s.i] == '\\' {
			s.i++
		}
	}
	s.i++
}

// skip moves past the value that starts at s.i.
func (s *scanner) skip() {
	depth := 0
	for {
		switch c := s.b[s.i]; c {
		case '"':
			s.skipString()
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			depth--
			s.i++
		default:
			// A literal or a number ends where a delimiter or space starts.
			for s.i < len(s.b) && !delimiter(s.b[s.i]) {
				s.i++
			}
		}
		if depth == 0 {
			return
		}
		s.space()
		s.take(',')
		s.take(':')
		s.space()
	}
}

// arrayLen moves past an array and counts its elements; isArray is false, and nothing consumed, when no array
// comes next.
func (s *scanner) arrayLen() (n int, isArray bool) {
	if !s.take('[') {
		return 0, false
	}
	for s.space(); !s.take(']'); s.space() {
		s.take(',')
		s.space()
		s.skip()
		n++
	}
	return n, true
}

// usage reads a usage object; plain is false when it is not one in the shape scanUsage reads.
func (s *scanner) usage() (u Usage, plain bool) {
	if !s.take('{') {
		return Usage{}, false
	}
	var seen [3]bool
	for s.space(); !s.take('}'); s.space() {
		s.take(',')
		s.space()
		name, simple := s.name()
		if !simple {
			return Usage{}, false
		}
		var field *int64
		switch {
		case string(name) == "prompt_tokens":
			field, seen[0], plain = &u.PromptTokens, true, !seen[0]
		case string(name) == "completion_tokens":
			field, seen[1], plain = &u.CompletionTokens, true, !seen[1]
		case string(name) == "total_tokens":
			field, seen[2], plain = &u.TotalTokens, true, !seen[2]
		case bytes.EqualFold(name, []byte("prompt_tokens")), bytes.EqualFold(name, []byte("completion_tokens")),
			bytes.EqualFold(name, []byte("total_tokens")):
			return Usage{}, false
		default:
			s.skip()
			continue
		}
		if !plain {
			return Usage{}, false
		}
		start := s.i
		s.skip()
		n, isInt := parseInt(s.b[start:s.i])
		if !isInt {
			// A string, a fraction, an exponent, null, or too large: encoding/json's rules for those differ.
			return Usage{}, false
		}
		*field = n
	}
	return u, true
}

// delimiter tells whether c ends a literal or a number.
func delimiter(c byte) bool {
	switch c {
	case ',', ':', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// parseInt reads a JSON number that is an integer fitting an int64, as encoding/json decodes one into an int64;
// isInt is false for anything else.
func parseInt(b []byte) (n int64, isInt bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u <= 1<<63:
		return -int64(u), true
	case !neg && u < 1<<63:
		return int64(u), true
	}
	return 0, false
}
