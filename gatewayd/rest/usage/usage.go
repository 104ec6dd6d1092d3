// Package usage serves GET /v1/gateway/usage: the calls, 429s and tokens of each model slug over the last hour or
// day, in time buckets, for one group or for the whole workspace, with the limits that apply to the group's calls
// of each slug scaled onto the bucket, so a chart can draw them as a line. It reads the usage rollup that billing
// keeps beside the events (billing.Store.Usage), written in the same write as each event, and the group's
// effective limits from the view gatewayd serves. The dashboard charts it on the group page and on the usage page.
package usage

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Window is a span the route answers, with the width of its buckets.
type Window struct {
	// Name is the window's value of the query parameter window.
	Name   string
	Span   time.Duration
	Bucket time.Duration
}

// Windows are the spans served: an hour in minutes and a day in half-hours, 60 and 48 buckets, so an answer stays
// small whatever the traffic. The first is the default.
var Windows = []Window{
	{Name: "1h", Span: time.Hour, Bucket: time.Minute},
	{Name: "24h", Span: 24 * time.Hour, Bucket: 30 * time.Minute},
}

// Bucket is the usage of one slug in one time bucket.
type Bucket struct {
	// Start is the bucket's start; it ends Answer.BucketSeconds later.
	Start string `json:"start"`
	billing.Counters
}

// Limit is a limit that applies to the group's calls of a slug, with its ceiling on one bucket.
type Limit struct {
	Type          string `json:"type"`
	Unit          string `json:"unit"`
	Threshold     int64  `json:"threshold"`
	SourceGroupID string `json:"source_group_id"`
	// PerBucket is the most the limit lets into one bucket (PerBucket).
	PerBucket int64 `json:"per_bucket"`
}

// Series is the usage of one slug over the window.
type Series struct {
	Slug string `json:"slug"`
	// Limits are the group's effective limits of the slug, nearest group first; none for the workspace's total.
	Limits  []Limit          `json:"limits"`
	Totals  billing.Counters `json:"totals"`
	Buckets []Bucket         `json:"buckets"`
}

// Answer is the body of GET /v1/gateway/usage.
type Answer struct {
	Window        string `json:"window"`
	BucketSeconds int64  `json:"bucket_seconds"`
	// Start is the first bucket's start, End the last bucket's end: the last bucket holds now, so End is in the
	// future and that bucket is still filling.
	Start string `json:"start"`
	End   string `json:"end"`
	// GroupID is the group counted; nil for the whole workspace.
	GroupID *string  `json:"group_id"`
	Series  []Series `json:"series"`
}

// Handler serves GET /v1/gateway/usage: ?window= (1h or 24h), ?group_id= (one group, else the workspace) and
// ?slug= (one slug, else every slug of the group or the workspace), for the workspace of namespace ns, whose
// caller the management wrapper admitted.
func Handler(store billing.Store, views func() *view.View, now func() time.Time) func(w http.ResponseWriter, r *http.Request, ns string) {
	return func(w http.ResponseWriter, r *http.Request, ns string) {
		var q [3]string
		for i, name := range []string{"window", "group_id", "slug"} {
			var ok bool
			if q[i], ok = kit.Query(w, r, name); !ok {
				return
			}
		}
		win, ok := ParseWindow(q[0])
		if !ok {
			kit.BadRequest(w, "window", fmt.Sprintf("window must be %s or %s, not %q.", Windows[0].Name, Windows[1].Name, q[0]))
			return
		}
		group, slug := q[1], q[2]
		n := views().Namespace(ns) // one view for the whole answer
		var g *view.Group
		if group != "" {
			if n != nil {
				g = n.Groups[group]
			}
			if g == nil {
				kit.NotFound(w, "Group", group)
				return
			}
		}
		ans, err := Read(r.Context(), store, n, g, slug, win, now().UTC())
		if err != nil {
			httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "Billing events are unavailable; retry shortly.", nil)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, ans)
	}
}

// ParseWindow is the window named s, the first of Windows when s is empty.
func ParseWindow(s string) (Window, bool) {
	if s == "" {
		return Windows[0], true
	}
	for _, w := range Windows {
		if w.Name == s {
			return w, true
		}
	}
	return Window{}, false
}

// Read answers the usage of group g of namespace n (the whole workspace when g is nil) over win ending at now,
// of slug only when it is not empty.
func Read(ctx context.Context, store billing.Store, n *view.Namespace, g *view.Group, slug string, win Window, now time.Time) (Answer, error) {
	group := billing.AllGroups
	if g != nil {
		group = g.ID
	}
	start, count := Span(win, now)
	minutes, err := store.Usage(ctx, nsName(n), group, start, start.Add(time.Duration(count)*win.Bucket-time.Nanosecond))
	if err != nil {
		return Answer{}, err
	}
	ans := Answer{
		Window: win.Name, BucketSeconds: int64(win.Bucket / time.Second),
		Start: start.Format(time.RFC3339), End: start.Add(time.Duration(count) * win.Bucket).Format(time.RFC3339),
		Series: []Series{},
	}
	if g != nil {
		ans.GroupID = &g.ID
	}
	byMinutes := Bucketize(minutes, start, win.Bucket, count)
	for _, s := range slugs(n, g, byMinutes) {
		if slug != "" && s != slug {
			continue
		}
		series := Series{Slug: s, Limits: []Limit{}, Buckets: byMinutes[s]}
		if series.Buckets == nil {
			series.Buckets = Bucketize(nil, start, win.Bucket, count)[""]
		}
		for _, b := range series.Buckets {
			series.Totals.Add(b.Counters)
		}
		if g != nil && g.Models[s] != nil {
			series.Limits = limitsOf(g.Models[s].Plan, win.Bucket)
		}
		ans.Series = append(ans.Series, series)
	}
	return ans, nil
}

func nsName(n *view.Namespace) string {
	if n == nil {
		return ""
	}
	return n.Name
}

// Span is the first bucket's start and the number of buckets of win ending with the bucket that holds now.
func Span(win Window, now time.Time) (time.Time, int) {
	count := int(win.Span / win.Bucket)
	last := now.Truncate(win.Bucket)
	return last.Add(-time.Duration(count-1) * win.Bucket), count
}

// Bucketize sums minutes into count buckets of width from start, per slug; every slug gets all count buckets,
// empty ones included, and the slug "" is the empty series.
func Bucketize(minutes []billing.UsageMinute, start time.Time, width time.Duration, count int) map[string][]Bucket {
	empty := func() []Bucket {
		out := make([]Bucket, count)
		for i := range out {
			out[i].Start = start.Add(time.Duration(i) * width).Format(time.RFC3339)
		}
		return out
	}
	out := map[string][]Bucket{"": empty()}
	for _, m := range minutes {
		i := int(m.Minute.Sub(start) / width)
		if m.Minute.Before(start) || i >= count {
			continue
		}
		if out[m.Slug] == nil {
			out[m.Slug] = empty()
		}
		out[m.Slug][i].Counters.Add(m.Counters)
	}
	return out
}

// slugs are the series answered, sorted: the group's effective slugs, or the workspace's endpoints, and every
// other slug with calls in the window (a slug removed since, say).
func slugs(n *view.Namespace, g *view.Group, counted map[string][]Bucket) []string {
	var out []string
	switch {
	case g != nil:
		for s := range g.Models {
			out = append(out, s)
		}
	case n != nil:
		for s := range n.Endpoints {
			out = append(out, s)
		}
	}
	for s := range counted {
		if s != "" {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// limitsOf is the limits of plan with their ceiling on a bucket of width.
func limitsOf(plan *limits.Plan, width time.Duration) []Limit {
	out := []Limit{}
	if plan == nil {
		return out
	}
	for _, l := range plan.Limits {
		out = append(out, Limit{
			Type: l.Key.Type.String(), Unit: l.Key.Unit.String(), Threshold: l.Threshold, SourceGroupID: l.SourceGroup,
			PerBucket: PerBucket(l.Threshold, l.Key.Unit, width),
		})
	}
	return out
}

// PerBucket is the most a limit of threshold per unit lets into one bucket of width. SECOND and MINUTE limits
// are rolling windows, so no window of the unit's length holds more than threshold, and a bucket of width holds
// at most threshold × width / unit (a MINUTE limit of 2 is 2 per one-minute bucket and 60 per half-hour; a SECOND
// limit of 2 is 120 per minute). A DAY or MONTH limit is a calendar day or month in UTC, and buckets never
// straddle midnight, so a bucket holds at most the whole threshold: the line is the period's allowance, which one
// bucket may spend.
func PerBucket(threshold int64, unit limits.Unit, width time.Duration) int64 {
	switch unit {
	case limits.Second:
		return threshold * int64(width/time.Second)
	case limits.Minute:
		return threshold * int64(width/time.Minute)
	}
	return threshold
}
