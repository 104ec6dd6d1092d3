package upstream

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRelayStreamStripsUsage: the usage chunk is read and hidden, every other event passes as sent.
func TestRelayStreamStripsUsage(t *testing.T) {
	for _, wantUsage := range []bool{false, true} {
		rec := &recorder{}
		d := newDeadline(timeoutForTests, func() {})
		before := time.Now()
		u, ok, first := relayStream(rec, strings.NewReader(relayInput), d, testDialect{}, wantUsage)
		d.timer.Stop()
		if !ok || u.Total() != 7 {
			t.Fatalf("usage %+v ok %v", u, ok)
		}
		if first.Before(before) {
			t.Errorf("first event relayed at %v, want a time of this relay", first)
		}
		if got := strings.Contains(rec.buf.String(), "prompt_tokens"); got != wantUsage {
			t.Errorf("include_usage=%v: usage chunk relayed = %v:\n%s", wantUsage, got, rec.buf.String())
		}
		if !strings.Contains(rec.buf.String(), "keep-alive") || !strings.HasSuffix(rec.buf.String(), "data: [DONE]\n\n") {
			t.Errorf("events lost:\n%s", rec.buf.String())
		}
	}
}

// TestRelayStreamFirstEvent: the time of the first event is that of the first event the client got, zero when
// the upstream sent none.
func TestRelayStreamFirstEvent(t *testing.T) {
	d := newDeadline(timeoutForTests, func() {})
	defer d.timer.Stop()
	if _, _, first := relayStream(&recorder{}, strings.NewReader(""), d, testDialect{}, true); !first.IsZero() {
		t.Errorf("an empty stream's first event at %v, want zero", first)
	}
}

// TestRelayStreamHoldsNothingWhileWaiting: whenever the relay waits for more of the upstream's answer, every
// event it wrote has been flushed to the client, however the answer is split; events that arrive together
// leave in one flush.
func TestRelayStreamHoldsNothingWhileWaiting(t *testing.T) {
	events := strings.SplitAfter(relayInput, "\n\n")
	events = events[:len(events)-1] // the empty string after the last separator
	for _, tc := range []struct {
		name        string
		pieces      []string
		wantFlushes int
	}{
		{"all at once", []string{relayInput}, 1},
		{"one event per read", events, 4},
		{"7-byte pieces", split(relayInput, 7), 4},
		// The first event alone, the second and third together, the fourth alone.
		{"event and a half", []string{events[0] + events[1][:9], events[1][9:] + events[2] + events[3][:4], events[3][4:]}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			up := &pieceReader{pieces: tc.pieces, rec: rec}
			d := newDeadline(timeoutForTests, func() {})
			defer d.timer.Stop()
			if _, ok, _ := relayStream(rec, up, d, testDialect{}, true); !ok {
				t.Fatal("relay failed")
			}
			if up.held != "" {
				t.Fatalf("waited on the upstream with %q written but not flushed", up.held)
			}
			if rec.buf.String() != relayInput {
				t.Fatalf("relayed %q, want %q", rec.buf.String(), relayInput)
			}
			if rec.flushes != tc.wantFlushes {
				t.Errorf("%d flushes, want %d", rec.flushes, tc.wantFlushes)
			}
		})
	}
}

const relayInput = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
	": keep-alive comment\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\n" +
	"data: [DONE]\n\n"

func split(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// pieceReader returns one piece per Read, and notes what the recorder held unflushed when a Read came.
type pieceReader struct {
	pieces []string
	rec    *recorder
	held   string
}

func (p *pieceReader) Read(b []byte) (int, error) {
	if unflushed := p.rec.buf.String()[p.rec.flushed:]; unflushed != "" && p.held == "" {
		p.held = unflushed
	}
	if len(p.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.pieces[0])
	p.pieces[0] = p.pieces[0][n:]
	if p.pieces[0] == "" {
		p.pieces = p.pieces[1:]
	}
	return n, nil
}

const timeoutForTests = 1 << 40

type recorder struct {
	buf     bytes.Buffer
	flushes int
	flushed int // bytes of buf flushed so far
	header  http.Header
}

func (r *recorder) Header() http.Header {
	if r.header == nil {
		r.header = http.Header{}
	}
	return r.header
}
func (r *recorder) Write(b []byte) (int, error) { return r.buf.Write(b) }
func (r *recorder) WriteHeader(int)             {}
func (r *recorder) Flush()                      { r.flushes++; r.flushed = r.buf.Len() }
