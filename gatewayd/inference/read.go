package inference

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// readBody reads a call's body once, into one buffer sized from Content-Length when the client sent it, so a
// large body costs its own size in memory and no copy. A declared length over the cap is refused before a byte is
// read.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *httperr.Error) {
	tooLarge := httperr.New(http.StatusRequestEntityTooLarge, httperr.CodePayloadTooLarge,
		fmt.Sprintf("Request body exceeds %d bytes.", h.opts.MaxBodyBytes), "")
	if r.ContentLength > h.opts.MaxBodyBytes {
		return nil, tooLarge
	}
	// The server holds no read timeout (uploads elsewhere may be long); this call's body gets one.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.opts.BodyReadTimeout))
	size := r.ContentLength
	if size < 0 {
		size = 512
	}
	// One byte more than the body, so ReadFrom sees EOF without growing the buffer.
	buf := bytes.NewBuffer(make([]byte, 0, size+1))
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes)); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, tooLarge
		}
		return nil, httperr.New(http.StatusBadRequest, httperr.CodeClientError, "Failed to read the request body.", err.Error())
	}
	return buf.Bytes(), nil
}

// maxPrereadBody is the largest declared body a predict call reads whole before it forwards it.
const maxPrereadBody = 64 << 10

// predictBody is the body a predict call forwards. A body that declares at most 64 KiB is read first and sent
// from memory: net/http's transport writes the headers and a body it cannot see the end of in two writes (and
// so two packets, Go issue 22088), which cost the model server a second wake-up per call, about 30 µs of added
// latency at concurrency 1 on loopback (docs/benchmarks.md). Larger bodies, and bodies of unknown length, stream
// as they arrive. A read that fails hands the transport what was read and then the error, so the call fails as
// a streamed one would.
func predictBody(body io.Reader, contentLength int64) io.Reader {
	if contentLength <= 0 || contentLength > maxPrereadBody {
		return body
	}
	buf := make([]byte, contentLength)
	n, err := io.ReadFull(body, buf)
	if err != nil {
		return io.MultiReader(bytes.NewReader(buf[:n]), errorReader{err})
	}
	return bytes.NewReader(buf)
}

// errorReader fails every read with err.
type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) { return 0, e.err }
