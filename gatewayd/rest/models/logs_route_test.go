package models_test

import (
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/gatewayd/requestlog"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

// messagesOf lists the messages of a logs answer, in its order.
func messagesOf(r resttest.Response) []string {
	GinkgoHelper()
	Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
	resttest.Conform("Logs", r.Raw)
	var out []string
	for _, l := range r.Body["logs"].([]any) {
		out = append(out, l.(map[string]any)["message"].(string))
	}
	return out
}

var _ = Describe("Deployment logs", func() {
	It("merge the deployment's Events and the request log, and apply every filter to both", func() {
		ns, admin := modelWorkspace()
		rl := requestlog.New("gatewayd-0", 0, 0)
		srv := resttest.Serve(rest.Options{RequestLogs: &requestlog.Cluster{Local: rl}})
		// An hour ago, away from the Events the manager writes now, so the window below holds only these lines.
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
		// The test writes Events as the manager's recorder would, with the times it chooses.
		for i, e := range []struct {
			s                   int
			typ, reason, detail string
		}{{1, corev1.EventTypeNormal, "Scaled", "to 1 replica"}, {4, corev1.EventTypeWarning, "ProbeFailed", "no answer from /health"}} {
			Expect(resttest.Client.Create(resttest.Ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: "v1.logs-" + string(rune('a'+i))},
				InvolvedObject: corev1.ObjectReference{Kind: "ModelDeployment", Name: "v1", Namespace: ns},
				Type:           e.typ, Reason: e.reason, Message: e.detail,
				FirstTimestamp: metav1.NewTime(at(e.s)), LastTimestamp: metav1.NewTime(at(e.s)),
				Source: corev1.EventSource{Component: "modelgate-manager"},
			})).To(Succeed())
		}
		// The predict path writes these: two calls to v1, and calls of other deployments that must not show.
		rl.Add(ns, "v1", requestlog.Entry{Time: at(2), Level: requestlog.LevelInfo, Message: "POST /production/predict 200 12ms", RequestID: "req_a"})
		rl.Add(ns, "v1", requestlog.Entry{Time: at(3), Level: requestlog.LevelError, Message: "POST /production/predict 502 3ms", RequestID: "req_b"})
		rl.Add(ns, "v2", requestlog.Entry{Time: at(2), Level: requestlog.LevelInfo, Message: "POST /deployment/v2/predict 200 1ms", RequestID: "req_v2"})
		rl.Add("another-workspace", "v1", requestlog.Entry{Time: at(2), Level: requestlog.LevelInfo, Message: "elsewhere", RequestID: "req_x"})

		window := func(body map[string]any) map[string]any {
			body["start_epoch_millis"], body["end_epoch_millis"] = base.UnixMilli(), at(10).UnixMilli()
			return body
		}
		const path = "/v1/models/sentiment/deployments/v1/logs"
		all := []string{"Scaled: to 1 replica", "POST /production/predict 200 12ms", "POST /production/predict 502 3ms", "ProbeFailed: no answer from /health"}
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, path, window(map[string]any{"direction": "asc"})))).To(Equal(all))
		// "production" names the deployment that environment serves: the same lines.
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, "/v1/models/sentiment/deployments/production/logs", window(map[string]any{"direction": "asc"})))).To(Equal(all))
		// Newest first by default; limit keeps the first lines of that order.
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, path, window(map[string]any{"limit": 2})))).To(Equal([]string{all[3], all[2]}))
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, path, window(map[string]any{"direction": "asc", "limit": 2})))).To(Equal(all[:2]))
		// min_level applies to both sources: a Warning Event is WARNING, a 502 is ERROR.
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, path, window(map[string]any{"direction": "asc", "min_level": "WARNING"})))).To(Equal(all[2:]))
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, path, window(map[string]any{"min_level": "ERROR"})))).To(Equal(all[2:3]))
		// The window includes both ends, and cuts lines of either source.
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, path, map[string]any{
			"start_epoch_millis": at(2).UnixMilli(), "end_epoch_millis": at(3).UnixMilli(), "direction": "asc"}))).To(Equal(all[1:3]))
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, path, map[string]any{
			"start_epoch_millis": at(3).UnixMilli() + 1, "end_epoch_millis": at(4).UnixMilli()}))).To(Equal(all[3:]))
		// search_pattern is an RE2 regular expression over the message, or the request id.
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, path, window(map[string]any{"direction": "asc", "search_pattern": "(?i)probe|scaled"})))).To(Equal([]string{all[0], all[3]}))
		r := resttest.Call(srv, admin, http.MethodPost, path, window(map[string]any{"search_pattern": "^req_a$"}))
		Expect(messagesOf(r)).To(Equal(all[1:2]))
		Expect(r.Body["logs"]).To(ConsistOf(And(HaveKeyWithValue("request_id", "req_a"), HaveKeyWithValue("replica", "gatewayd-0"),
			HaveKeyWithValue("level", "INFO"), HaveKeyWithValue("timestamp", at(2).UTC().Format("2006-01-02T15:04:05.000Z")))))
		r = resttest.Call(srv, admin, http.MethodPost, path, window(map[string]any{"search_pattern": "Scaled"}))
		Expect(r.Body["logs"]).To(ConsistOf(And(HaveKeyWithValue("request_id", BeNil()), HaveKeyWithValue("replica", BeNil()))))
		// Without a window: the last day, which holds the manager's own Events of this deployment too.
		Expect(messagesOf(resttest.Call(srv, admin, http.MethodPost, path, nil))).To(ContainElements(all))

		// Every field of the body is checked, and a refusal names it.
		for _, tc := range []struct {
			body  any
			field string
		}{
			{map[string]any{"start_epoch_millis": at(5).UnixMilli(), "end_epoch_millis": at(4).UnixMilli()}, "start_epoch_millis"},
			{map[string]any{"start_epoch_millis": -1}, "start_epoch_millis"},
			{map[string]any{"end_epoch_millis": -5}, "end_epoch_millis"},
			{map[string]any{"direction": "sideways"}, "direction"},
			{map[string]any{"limit": 0}, "limit"},
			{map[string]any{"limit": 5000}, "limit"},
			{map[string]any{"limit": "ten"}, "limit"},
			{map[string]any{"min_level": "LOUD"}, "min_level"},
			{map[string]any{"search_pattern": "(unclosed"}, "search_pattern"},
		} {
			r := resttest.Call(srv, admin, http.MethodPost, path, tc.body)
			Expect(r.Code).To(Equal(http.StatusBadRequest), "%v: %s", tc.body, r)
			resttest.Conform("Error", r.Raw)
			Expect(r.Body["detail"]).To(ContainElement(HaveKeyWithValue("field", tc.field)), "%v: %s", tc.body, r)
		}
	})
})
