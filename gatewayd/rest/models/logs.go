package models

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/authz"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/podlogs"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// The logs route merges three sources of a deployment's lines: its Events (what the manager did), this gatewayd
// replica's request log (the predict calls it served), and what the deployment's pods print (pods/log). Every
// filter of the body applies to every source, and the merged lines are ordered by time.

// logsRequest is the body of the logs route.
type logsRequest struct {
	StartEpochMillis *int64 `json:"start_epoch_millis"`
	EndEpochMillis   *int64 `json:"end_epoch_millis"`
	Direction        string `json:"direction"`
	Limit            *int   `json:"limit"`
	MinLevel         string `json:"min_level"`
	SearchPattern    string `json:"search_pattern"`
}

type logJSON struct {
	Timestamp string  `json:"timestamp"`
	Message   string  `json:"message"`
	Replica   *string `json:"replica"`
	RequestID *string `json:"request_id"`
	Level     string  `json:"level"`
}

// Bounds of a logs request.
const (
	maxLogs          = 1000
	defaultLogs      = 100
	defaultLogWindow = 24 * time.Hour
	maxSearchPattern = 256
)

var levels = map[string]int{"DEBUG": 0, "INFO": 1, "WARNING": 2, "ERROR": 3}

// logTimestamp is a line's time on the wire: RFC 3339 in UTC, to the millisecond, so lines of one second keep
// their order for a reader.
const logTimestamp = "2006-01-02T15:04:05.000Z07:00"

// deploymentLogs answers a deployment's log lines from its three sources, newest first unless direction is "asc".
// A source that cannot be read (pods/log of a pod that has not started) leaves its lines out and is logged; the
// others still answer.
func (a *api) deploymentLogs(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req logsRequest
	if !kit.DecodeBody(w, r, &req, true) {
		return
	}
	q, field, msg := parseLogQuery(req, a.Opts.Clock())
	if field != "" {
		kit.BadRequest(w, field, msg)
		return
	}
	_, d, ok := a.loadModelDeployment(w, r, c, authz.ActionListModels)
	if !ok {
		return
	}
	var events corev1.EventList
	sel := fields.SelectorFromSet(fields.Set{"involvedObject.name": d.Name, "involvedObject.kind": "ModelDeployment"})
	if err := a.Opts.Client.List(r.Context(), &events, client.InNamespace(c.Namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
		kit.WriteKubeError(w, r, "list events", err)
		return
	}
	lines := q.events(events.Items)
	if a.Opts.RequestLogs != nil {
		answers, errs := a.Opts.RequestLogs.Read(r.Context(), c.Namespace, d.Name)
		for _, err := range errs {
			logr.FromContextOrDiscard(r.Context()).Error(err, "A gatewayd replica's request lines left out of a logs answer", "deployment", d.Name)
		}
		for _, ans := range answers {
			lines = append(lines, q.requests(ans.Replica, ans.Entries)...)
		}
	}
	if a.Opts.PodLogs != nil {
		pods, err := a.Opts.PodLogs.Read(r.Context(), d, q.podQuery())
		if err != nil {
			logr.FromContextOrDiscard(r.Context()).Error(err, "Pod logs left out of a logs answer", "deployment", d.Name)
		}
		lines = append(lines, q.pods(pods)...)
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{"logs": q.order(lines)})
}

// logQuery is a validated logs request.
type logQuery struct {
	start, end time.Time
	asc        bool
	limit      int
	minLevel   int
	pattern    *regexp.Regexp
}

// parseLogQuery checks a logs request. On a refusal it returns the field and a message saying the rule.
func parseLogQuery(req logsRequest, now time.Time) (q logQuery, field, msg string) {
	q = logQuery{end: now, limit: defaultLogs}
	if req.EndEpochMillis != nil {
		if *req.EndEpochMillis < 0 {
			return q, "end_epoch_millis", "end_epoch_millis must not be negative."
		}
		q.end = time.UnixMilli(*req.EndEpochMillis)
	}
	q.start = q.end.Add(-defaultLogWindow)
	if req.StartEpochMillis != nil {
		if *req.StartEpochMillis < 0 {
			return q, "start_epoch_millis", "start_epoch_millis must not be negative."
		}
		q.start = time.UnixMilli(*req.StartEpochMillis)
	}
	if q.start.After(q.end) {
		return q, "start_epoch_millis", "start_epoch_millis must not be after end_epoch_millis."
	}
	switch strings.ToLower(req.Direction) {
	case "", "desc":
	case "asc":
		q.asc = true
	default:
		return q, "direction", `direction must be "asc" or "desc".`
	}
	if req.Limit != nil {
		if *req.Limit < 1 || *req.Limit > maxLogs {
			return q, "limit", fmt.Sprintf("limit must be between 1 and %d.", maxLogs)
		}
		q.limit = *req.Limit
	}
	if req.MinLevel != "" {
		lvl, ok := levels[strings.ToUpper(req.MinLevel)]
		if !ok {
			return q, "min_level", "min_level must be one of DEBUG, INFO, WARNING, ERROR."
		}
		q.minLevel = lvl
	}
	if req.SearchPattern != "" {
		if len(req.SearchPattern) > maxSearchPattern {
			return q, "search_pattern", fmt.Sprintf("search_pattern must be at most %d characters.", maxSearchPattern)
		}
		re, err := regexp.Compile(req.SearchPattern)
		if err != nil {
			// A *syntax.Error wraps nothing: its own text says what is wrong, and where.
			return q, "search_pattern", "search_pattern must be a regular expression in RE2 syntax: " + err.Error()
		}
		q.pattern = re
	}
	return q, "", ""
}

// keep says whether a line passes the filters: its time in [start, end], its level at least min_level, and
// search_pattern found in its message or its request id.
func (q logQuery) keep(at time.Time, level, msg, requestID string) bool {
	if at.Before(q.start) || at.After(q.end) || levels[level] < q.minLevel {
		return false
	}
	return q.pattern == nil || q.pattern.MatchString(msg) || (requestID != "" && q.pattern.MatchString(requestID))
}

// logLine is a kept line with its time, for ordering.
type logLine struct {
	at time.Time
	logJSON
}

func line(at time.Time, level, msg, replica, requestID string) logLine {
	l := logLine{at: at, logJSON: logJSON{Timestamp: at.UTC().Format(logTimestamp), Message: msg, Level: level}}
	if replica != "" {
		l.Replica = &replica
	}
	if requestID != "" {
		l.RequestID = &requestID
	}
	return l
}

// events are the kept lines of a deployment's Events: Warning events are WARNING, others INFO.
func (q logQuery) events(events []corev1.Event) []logLine {
	var out []logLine
	for _, e := range events {
		at := e.LastTimestamp.Time
		if at.IsZero() {
			at = e.EventTime.Time
		}
		if at.IsZero() {
			at = e.CreationTimestamp.Time
		}
		level := requestlog.LevelInfo
		if e.Type == corev1.EventTypeWarning {
			level = requestlog.LevelWarning
		}
		msg := e.Reason + ": " + e.Message
		if q.keep(at, level, msg, "") {
			out = append(out, line(at, level, msg, "", ""))
		}
	}
	return out
}

// requests are the kept lines of one replica's request log.
func (q logQuery) requests(replica string, entries []requestlog.Entry) []logLine {
	var out []logLine
	for _, e := range entries {
		if q.keep(e.Time, e.Level, e.Message, e.RequestID) {
			out = append(out, line(e.Time, e.Level, e.Message, replica, e.RequestID))
		}
	}
	return out
}

// podQuery asks the pod-log reader for the lines this query keeps: as many per pod as the answer may hold, the
// newest ones unless the answer is in ascending order.
func (q logQuery) podQuery() podlogs.Query {
	return podlogs.Query{Since: q.start, Until: q.end, Limit: q.limit, Newest: !q.asc,
		Match: func(l podlogs.Line) bool { return q.keep(l.Time, l.Level, l.Message, "") }}
}

// pods are the pod lines as log lines, the pod's name as their replica. The filters apply again, so a reader
// that filters less still answers right.
func (q logQuery) pods(lines []podlogs.Line) []logLine {
	out := make([]logLine, 0, len(lines))
	for _, l := range lines {
		if q.keep(l.Time, l.Level, l.Message, "") {
			out = append(out, line(l.Time, l.Level, l.Message, l.Pod, ""))
		}
	}
	return out
}

// order sorts the lines of every source by time in the asked direction (lines of one instant keep their
// sources' order: Events, requests, pods) and keeps the first limit.
func (q logQuery) order(lines []logLine) []logJSON {
	slices.SortStableFunc(lines, func(x, y logLine) int {
		if q.asc {
			return x.at.Compare(y.at)
		}
		return y.at.Compare(x.at)
	})
	out := make([]logJSON, 0, min(len(lines), q.limit))
	for i := range min(len(lines), q.limit) {
		out = append(out, lines[i].logJSON)
	}
	return out
}
