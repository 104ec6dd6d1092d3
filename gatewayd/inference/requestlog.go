package inference

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelgate/modelgate/gatewayd/requestlog"
)

// stampRequestID sets the request id of the predict call r on its answer and returns it.
func stampRequestID(w http.ResponseWriter, r *http.Request) string {
	id := requestlog.ID(r.Header.Get(requestlog.Header))
	w.Header().Set(requestlog.Header, id)
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
