package inference

import (
	"bytes"
	"errors"
	"fmt"
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
