package billing

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// eventJSONSize is a little more than the length of an event's JSON with the ids gatewayd gives: the stores size
// the buffer they encode a batch into with it.
const eventJSONSize = 392

// appendEvent appends to dst the bytes json.Marshal(e) gives, without its reflection: the stores keep those bytes,
// and the writer encodes one event per model call. The fields, their order and their escaping are
// encoding/json's (TestAppendEventIsJSONMarshal and FuzzAppendEvent compare the two), so a field Event gains
// is one to add here too; the tests fail until it is. When json.Marshal fails, which it does only for a
// timestamp RFC 3339 cannot write (a year outside [0,9999], a zone offset of 24 hours or more), appendEvent
// answers json.Marshal's own error, and dst without the event's bytes.
func appendEvent(dst []byte, e *Event) ([]byte, error) {
	n0 := len(dst)
	dst = append(dst, `{"idempotencyKey":`...)
	dst = appendJSONString(dst, e.IdempotencyKey)
	dst = append(dst, `,"timestamp":"`...)
	ts := len(dst)
	dst = e.Timestamp.AppendFormat(dst, time.RFC3339Nano)
	if !strictRFC3339(dst[ts:]) {
		// json.Marshal's error, or its bytes should it take a time this check refuses.
		v, err := json.Marshal(e)
		if err != nil {
			return dst[:n0], err
		}
		return append(dst[:n0], v...), nil
	}
	dst = append(dst, `","requestId":`...)
	dst = appendJSONString(dst, e.RequestID)
	dst = append(dst, `,"modelSlug":`...)
	dst = appendJSONString(dst, e.ModelSlug)
	dst = append(dst, `,"externalEntityId":`...)
	dst = appendJSONString(dst, e.ExternalEntityID)
	dst = append(dst, `,"groupId":`...)
	dst = appendJSONString(dst, e.GroupID)
	dst = append(dst, `,"apiKeyPrefix":`...)
	dst = appendJSONString(dst, e.APIKeyPrefix)
	dst = append(dst, `,"statusCode":`...)
	dst = strconv.AppendInt(dst, int64(e.StatusCode), 10)
	dst = append(dst, `,"tokens":{"inputTokens":`...)
	dst = strconv.AppendInt(dst, e.Tokens.InputTokens, 10)
	dst = append(dst, `,"outputTokens":`...)
	dst = strconv.AppendInt(dst, e.Tokens.OutputTokens, 10)
	dst = append(dst, `},"costMicroUsd":`...)
	dst = strconv.AppendInt(dst, e.CostMicroUsd, 10)
	if e.Target != "" {
		dst = append(dst, `,"target":`...)
		dst = appendJSONString(dst, e.Target)
	}
	if e.Provider != "" {
		dst = append(dst, `,"provider":`...)
		dst = appendJSONString(dst, e.Provider)
	}
	if e.Attempts != 0 {
		dst = append(dst, `,"attempts":`...)
		dst = strconv.AppendInt(dst, int64(e.Attempts), 10)
	}
	return append(dst, '}'), nil
}

// strictRFC3339 reports whether b, a time formatted with time.RFC3339Nano, is one time.Time.MarshalJSON accepts:
// the checks of the time package's appendStrictRFC3339, on the same bytes (both format with
// appendFormatRFC3339).
func strictRFC3339(b []byte) bool {
	if len(b) < len("2006-01-02T15:04:05Z") || b[len("9999")] != '-' { // the year must be exactly 4 digits wide
		return false
	}
	if b[len(b)-1] == 'Z' {
		return true
	}
	// The zone's hour must be in [0,23].
	c := b[len(b)-len("Z07:00")]
	h := b[len(b)-len("07:00"):]
	return !('0' <= c && c <= '9') && 10*(h[0]-'0')+(h[1]-'0') < 24
}

// appendJSONString appends s as encoding/json writes a string with its HTML escaping on, as json.Marshal does
// (encodeState.string, appendString in encoding/json/encode.go): '"' and '\\' escaped, \b \f \n \r \t as such,
// the other control characters and '<', '>', '&' as \u00XX, U+2028 and U+2029 as \u2028 and \u2029, and each
// byte of invalid UTF-8 as \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default: // the other bytes below 0x20, and '<', '>', '&'
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe is encoding/json's htmlSafeSet: the ASCII bytes it writes in a string as they are, with HTML escaping
// on (every byte from 0x20 up, DEL included, but '"', '\\', '<', '>' and '&').
var jsonSafe = func() (safe [utf8.RuneSelf]bool) {
	for b := byte(0x20); b < utf8.RuneSelf; b++ {
		safe[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return safe
}()
