package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
	"time"
)

// relayStream copies an SSE stream event by event. Each event leaves as soon as it is complete, so nothing but
// the current event is buffered; events that arrived together leave in one write. The dialect reads the usage
// from the event that reports it and says whether that event goes on to the client. Each event pushes the
// deadline back: for streams the timeout bounds the gap between chunks, not the whole answer. first is when the
// first event left for the client, zero when none did.
func relayStream(w Sink, body io.Reader, d *deadline, dialect Dialect, clientWantsUsage bool) (u Usage, ok bool, first time.Time) {
	buf := streamBuffers.Get().(*streamBuffer)
	defer buf.release()
	br := buf.reader
	br.Reset(body)
	event := buf.event[:0]
	defer func() { buf.event = event }()
	unflushed := false
	// send passes the event on. It leaves it in the response buffer only while the next event is already
	// complete in hand, so events that arrived together leave in one write and none waits on the upstream.
	send := func() bool {
		if len(event) > 0 {
			d.reset()
			keep := true
			if dialect != nil {
				var got Usage
				var found bool
				if got, found, keep = dialect.EventUsage(event, clientWantsUsage); found {
					u = got
				}
			}
			if keep {
				if _, err := w.Write(event); err != nil {
					return false
				}
				if first.IsZero() {
					first = time.Now()
				}
				unflushed = true
			}
			event = event[:0]
		}
		if unflushed && !eventBuffered(br) {
			w.Flush()
			unflushed = false
		}
		return true
	}
	for {
		line, err := br.ReadSlice('\n')
		event = append(event, line...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil && len(bytes.TrimRight(line, "\r\n")) == 0 {
			if !send() {
				return u, false, first
			}
			continue
		}
		if err != nil {
			ok := send()
			return u, ok && errors.Is(err, io.EOF), first
		}
	}
}

// eventBuffered reports whether br already holds a complete SSE event: a line followed by an empty line.
func eventBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// copyBuffers and streamBuffers keep the relay buffers of finished calls for the next ones: allocating them per
// call cost about 15% of a plain call's CPU, most of it zeroing 32 KiB, and drove garbage collection.
var (
	copyBuffers   = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	streamBuffers = sync.Pool{New: func() any { return &streamBuffer{reader: bufio.NewReaderSize(nil, 64<<10)} }}
)

// copyAnswer copies an upstream answer to the sink through a pooled buffer.
func copyAnswer(dst io.Writer, src io.Reader) (int64, error) {
	b := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(b)
	return io.CopyBuffer(dst, src, *b)
}

// streamBuffer is relayStream's line reader and event buffer.
type streamBuffer struct {
	reader *bufio.Reader
	event  []byte
}

// maxPooledEvent bounds the event buffer a pooled streamBuffer keeps; a rare huge event is not held forever.
const maxPooledEvent = 64 << 10

func (b *streamBuffer) release() {
	b.reader.Reset(nil)
	if cap(b.event) > maxPooledEvent {
		b.event = nil
	}
	streamBuffers.Put(b)
}

var dataPrefix = []byte("data:")

// EventData joins the data lines of one server-sent event, for a Dialect that reads an event's JSON.
func EventData(event []byte) []byte {
	var out []byte
	for line := range bytes.Lines(event) {
		if rest, ok := bytes.CutPrefix(line, dataPrefix); ok {
			out = append(out, bytes.TrimSpace(rest)...)
		}
	}
	return out
}

// maxEvent bounds one server-sent event that ReadEvents reads.
const maxEvent = 16 << 20

// ReadEvents reads the server-sent events of r one at a time, as they arrive, and calls fn with the joined data
// lines of each event that has any (a Translation's Stream reads a provider's events with it). It stops at the
// first error of fn or r; the end of r is nil. The data passed to fn is only valid during the call.
func ReadEvents(r io.Reader, fn func(data []byte) error) error {
	buf := streamBuffers.Get().(*streamBuffer)
	defer buf.release()
	br := buf.reader
	br.Reset(r)
	data := buf.event[:0]
	defer func() { buf.event = data }()
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(line) > maxEvent {
				return errors.New("a server-sent event is too long")
			}
			continue
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		if rest, ok := bytes.CutPrefix(trimmed, dataPrefix); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(rest, []byte(" "))...)
			if len(data) > maxEvent {
				return errors.New("a server-sent event is too long")
			}
		} else if len(trimmed) == 0 && len(line) > 0 && len(data) > 0 {
			// The empty line that ends an event.
			if ferr := fn(data); ferr != nil {
				return ferr
			}
			data = data[:0]
		}
		line = line[:0]
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(data) > 0 {
					return fn(data)
				}
				return nil
			}
			return err
		}
	}
}
