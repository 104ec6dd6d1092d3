package inference

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelgate/modelgate/gatewayd/requestlog"
)

// requestIDHeader carries a call's request id: the caller's, when it brings a usable one, else a new one. The
// answer carries it back, the model server receives it, and the deployment's request log records it.
const requestIDHeader = "X-Request-Id"

// stampRequestID sets the request id of the predict call r on its answer and returns it.
func stampRequestID(w http.ResponseWriter, r *http.Request) string {
	id := requestlog.ID(r.Header.Get(requestIDHeader))
	w.Header().Set(requestIDHeader, id)
	return id
}

// logPredict adds the predict call r, answered through sw, to the request log of deployment: a line like
// "POST /production/predict 200 12ms" (the path after /models/{model_id}). Deferred, so it reads the status
// the call ended with.
func (h *Handler) logPredict(sw *statusWriter, r *http.Request, id, namespace, deployment string, start time.Time) {
	if h.opts.RequestLog == nil {
		return
	}
	status := sw.code()
	path := r.URL.Path
	if i := strings.Index(path, "/models/"); i >= 0 {
		rest := path[i+len("/models/"):]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			path = rest[j:]
		}
	}
	msg := r.Method + " " + path + " " + strconv.Itoa(status) + " " + strconv.FormatInt(time.Since(start).Milliseconds(), 10) + "ms"
	h.opts.RequestLog.Add(namespace, deployment, requestlog.Entry{
		Time: h.opts.Clock.Now(), Level: requestlog.LevelOf(status), Message: msg, RequestID: id,
	})
}
