package inference

import (
	"bytes"
	"io"
	"net/http"

	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
)

// readBody reads a call's body once, into one buffer sized from Content-Length when the client sent it, so a
// large body costs its own size in memory and no copy. A declared length over the cap is refused before a byte is
// read (ingress.Limit); the body's read deadline is gatewayd's (ingress.Guard).
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *httperr.Error) {
	if e := ingress.Limit(w, r, h.opts.MaxBodyBytes); e != nil {
		return nil, e
	}
	size := r.ContentLength
	if size < 0 {
		size = 512
	}
	// One byte more than the body, so ReadFrom sees EOF without growing the buffer.
	buf := bytes.NewBuffer(make([]byte, 0, size+1))
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return nil, ingress.ReadFailed(err)
	}
	return buf.Bytes(), nil
}

// maxPrereadBody is the largest declared body a predict call reads whole before it forwards it.
const maxPrereadBody = 64 << 10

// predictBody is the body a predict call forwards. A body that declares at most 64 KiB is read first and sent
// from memory: net/http's transport writes the headers and a body it cannot see the end of in two writes (and
// so two packets, Go issue 22088), which cost the model server a second wake-up per call, about 30 µs of added
// latency at concurrency 1 on loopback (docs/benchmarks.md); and a small body that does not arrive never reaches
// the model (the error is returned). Larger bodies, and bodies of unknown length, stream as they arrive.
func predictBody(body io.Reader, contentLength int64) (io.Reader, error) {
	if contentLength <= 0 || contentLength > maxPrereadBody {
		return body, nil
	}
	buf := make([]byte, contentLength)
	if _, err := io.ReadFull(body, buf); err != nil {
		return nil, err
	}
	return bytes.NewReader(buf), nil
}
