package models

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/modelgate/modelgate/gatewayd/podlogs"
	"github.com/modelgate/modelgate/gatewayd/requestlog"
)

var now = time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC)

func TestParseLogQuery(t *testing.T) {
	ms := func(t time.Time) *int64 { return ptr.To(t.UnixMilli()) }
	for _, tc := range []struct {
		name  string
		req   logsRequest
		field string
		check func(logQuery) bool
	}{
		{"defaults: the last day, newest first, 100 lines", logsRequest{}, "", func(q logQuery) bool {
			return q.end.Equal(now) && q.start.Equal(now.Add(-24*time.Hour)) && !q.asc && q.limit == 100 && q.minLevel == 0 && q.pattern == nil
		}},
		{"a day before the end when only the end is given", logsRequest{EndEpochMillis: ms(now.Add(-time.Hour))}, "", func(q logQuery) bool {
			return q.start.Equal(now.Add(-25 * time.Hour))
		}},
		{"asc, limit, level and pattern", logsRequest{Direction: "ASC", Limit: ptr.To(7), MinLevel: "warning", SearchPattern: "predict 5.."}, "", func(q logQuery) bool {
			return q.asc && q.limit == 7 && q.minLevel == levels["WARNING"] && q.pattern.MatchString("POST /production/predict 502 1ms")
		}},
		{"start after end", logsRequest{StartEpochMillis: ms(now), EndEpochMillis: ms(now.Add(-time.Second))}, "start_epoch_millis", nil},
		{"negative start", logsRequest{StartEpochMillis: ptr.To(int64(-1))}, "start_epoch_millis", nil},
		{"negative end", logsRequest{EndEpochMillis: ptr.To(int64(-1))}, "end_epoch_millis", nil},
		{"direction", logsRequest{Direction: "up"}, "direction", nil},
		{"limit 0", logsRequest{Limit: ptr.To(0)}, "limit", nil},
		{"limit 1001", logsRequest{Limit: ptr.To(1001)}, "limit", nil},
		{"min_level", logsRequest{MinLevel: "LOUD"}, "min_level", nil},
		{"search_pattern not RE2", logsRequest{SearchPattern: "a(b"}, "search_pattern", nil},
		{"search_pattern too long", logsRequest{SearchPattern: strings.Repeat("a", 257)}, "search_pattern", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, field, msg := parseLogQuery(tc.req, now)
			if field != tc.field {
				t.Fatalf("field = %q (%s), want %q", field, msg, tc.field)
			}
			if field != "" && !strings.Contains(msg, field) {
				t.Errorf("message %q does not name the field %s", msg, field)
			}
			if tc.check != nil && !tc.check(q) {
				t.Errorf("query = %+v", q)
			}
		})
	}
}

// TestMerge: lines of the three sources are filtered alike, then ordered by time and cut to the limit.
func TestMerge(t *testing.T) {
	at := func(s int) time.Time { return now.Add(time.Duration(s) * time.Second) }
	events := []corev1.Event{
		{Reason: "StatusChanged", Message: "ACTIVE", Type: corev1.EventTypeNormal, LastTimestamp: metav1.NewTime(at(1))},
		{Reason: "ProbeFailed", Message: "no answer", Type: corev1.EventTypeWarning, LastTimestamp: metav1.NewTime(at(4))},
		// An event with only an eventTime, as events.k8s.io/v1 writes them.
		{Reason: "Scaled", Message: "to 2", Type: corev1.EventTypeNormal, EventTime: metav1.NewMicroTime(at(6))},
	}
	requests := []requestlog.Entry{
		{Time: at(2), Level: "INFO", Message: "POST /production/predict 200 3ms", RequestID: "req_a"},
		{Time: at(5), Level: "ERROR", Message: "POST /production/predict 502 1ms", RequestID: "req_b"},
	}
	pods := []podlogs.Line{
		{Time: at(3), Pod: "md-v1-x", Level: "INFO", Message: "loaded"},
		{Time: at(7), Pod: "md-v1-x", Level: "ERROR", Message: "ERROR oom"},
	}
	for _, tc := range []struct {
		name string
		req  logsRequest
		want string
	}{
		{"all, newest first", logsRequest{}, "ERROR oom|Scaled: to 2|POST /production/predict 502 1ms|ProbeFailed: no answer|loaded|POST /production/predict 200 3ms|StatusChanged: ACTIVE"},
		{"asc, limit 3", logsRequest{Direction: "asc", Limit: ptr.To(3)}, "StatusChanged: ACTIVE|POST /production/predict 200 3ms|loaded"},
		{"desc, limit 2", logsRequest{Limit: ptr.To(2)}, "ERROR oom|Scaled: to 2"},
		{"WARNING and up", logsRequest{MinLevel: "WARNING", Direction: "asc"}, "ProbeFailed: no answer|POST /production/predict 502 1ms|ERROR oom"},
		{"ERROR only", logsRequest{MinLevel: "ERROR", Direction: "asc"}, "POST /production/predict 502 1ms|ERROR oom"},
		{"window [2 s, 4 s], both ends in", logsRequest{StartEpochMillis: ptr.To(at(2).UnixMilli()), EndEpochMillis: ptr.To(at(4).UnixMilli()), Direction: "asc"},
			"POST /production/predict 200 3ms|loaded|ProbeFailed: no answer"},
		{"search a message", logsRequest{SearchPattern: "^POST .* 5\\d\\d "}, "POST /production/predict 502 1ms"},
		{"search a request id", logsRequest{SearchPattern: "req_a"}, "POST /production/predict 200 3ms"},
		{"search every source", logsRequest{SearchPattern: "(?i)active|oom|200", Direction: "asc"}, "StatusChanged: ACTIVE|POST /production/predict 200 3ms|ERROR oom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, field, msg := parseLogQuery(tc.req, at(60))
			if field != "" {
				t.Fatalf("refused: %s: %s", field, msg)
			}
			lines := q.events(events)
			lines = append(lines, q.requests("gw-0", requests)...)
			lines = append(lines, q.pods(pods)...)
			var got []string
			for _, l := range q.order(lines) {
				got = append(got, l.Message)
			}
			if strings.Join(got, "|") != tc.want {
				t.Errorf("lines\n got %s\nwant %s", strings.Join(got, "|"), tc.want)
			}
		})
	}
}

// TestLineFields: each source fills replica and request_id as the wire shape says.
func TestLineFields(t *testing.T) {
	q, _, _ := parseLogQuery(logsRequest{Direction: "asc"}, now.Add(time.Minute))
	lines := q.events([]corev1.Event{{Reason: "R", Message: "m", LastTimestamp: metav1.NewTime(now)}})
	lines = append(lines, q.requests("gw-0", []requestlog.Entry{{Time: now.Add(1500 * time.Millisecond), Level: "INFO", Message: "x", RequestID: "req_1"}})...)
	lines = append(lines, q.pods([]podlogs.Line{{Time: now.Add(2 * time.Second), Pod: "md-v1-x", Level: "INFO", Message: "y"}})...)
	out := q.order(lines)
	if len(out) != 3 {
		t.Fatalf("%d lines, want 3", len(out))
	}
	if out[0].Replica != nil || out[0].RequestID != nil || out[0].Timestamp != "2026-03-16T10:00:00.000Z" {
		t.Errorf("event line = %+v, want no replica, no request id, a millisecond timestamp", out[0])
	}
	if out[1].Replica == nil || *out[1].Replica != "gw-0" || out[1].RequestID == nil || *out[1].RequestID != "req_1" || out[1].Timestamp != "2026-03-16T10:00:01.500Z" {
		t.Errorf("request line = %+v, want replica gw-0 and request id req_1", out[1])
	}
	if out[2].Replica == nil || *out[2].Replica != "md-v1-x" || out[2].RequestID != nil {
		t.Errorf("pod line = %+v, want the pod as replica", out[2])
	}
}
