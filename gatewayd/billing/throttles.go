package billing

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// Values of Refusal.By: what refused a call with 429.
const (
	// RefusedByGroup is a limit of a group's effective models: the caller's own group or, in CASCADING mode, an
	// ancestor's (Refusal.SourceGroup).
	RefusedByGroup = "GROUP_LIMIT"
	// RefusedByTier is the workspace's model-API tier (Workspace.spec.modelAPILimits) on a shared model API.
	RefusedByTier = "MODEL_API_TIER"
	// RefusedByOther is any other 429: too many request bytes in flight for the key, or the model's own 429.
	RefusedByOther = "OTHER"
)

// Refusal names the limit that refused a call with 429. It travels beside the event, never inside it: the event
// is the signed webhook's payload, whose fields are fixed (docs/limits.md "Billing events"), so the refusal
// only feeds the throttle rollup.
type Refusal struct {
	// By is RefusedByGroup, RefusedByTier or RefusedByOther.
	By string `json:"by"`
	// Type and Unit are the limit's API names (REQUEST, TOKEN or COST; SECOND, MINUTE, DAY or MONTH); empty for RefusedByOther.
	Type string `json:"type,omitempty"`
	Unit string `json:"unit,omitempty"`
	// SourceGroup is the group that set a RefusedByGroup limit.
	SourceGroup string `json:"sourceGroup,omitempty"`
}

// ThrottleKey is what one rollup counter counts: the 429s of one (group, slug, limit). Its JSON is the counter's
// name in both stores, so the field order is part of the stored format.
type ThrottleKey struct {
	GroupID          string `json:"g"`
	ExternalEntityID string `json:"e"`
	Slug             string `json:"s"`
	By               string `json:"b"`
	Type             string `json:"t,omitempty"`
	Unit             string `json:"u,omitempty"`
	SourceGroup      string `json:"src,omitempty"`
}

// ThrottleCount is a rollup counter summed over a window.
type ThrottleCount struct {
	ThrottleKey
	Count int64
}

// ThrottleBucket is the width of a rollup counter: 429s are counted per minute.
const ThrottleBucket = time.Minute

// ThrottleKeep is how long the rollup keeps a minute's counters: the window served is an hour, and the second
// hour leaves room for a clock that differs between replicas.
const ThrottleKeep = 2 * time.Hour

// throttleOf is the rollup counter a record adds one to, and false when the record is not a 429.
func throttleOf(r *Record) (ThrottleKey, bool) {
	if r.Event.StatusCode != 429 {
		return ThrottleKey{}, false
	}
	k := ThrottleKey{GroupID: r.Event.GroupID, ExternalEntityID: r.Event.ExternalEntityID, Slug: r.Event.ModelSlug, By: RefusedByOther}
	if f := r.Refusal; f != nil && f.By != "" {
		k.By, k.Type, k.Unit, k.SourceGroup = f.By, f.Type, f.Unit, f.SourceGroup
	}
	return k, true
}

func (k ThrottleKey) encode() []byte {
	b, _ := json.Marshal(k) // strings only: cannot fail
	return b
}

func decodeThrottleKey(b []byte) (ThrottleKey, error) {
	var k ThrottleKey
	err := json.Unmarshal(b, &k)
	return k, err
}

// throttleMinute is the minute of t as Unix minutes, the rollup's bucket number.
func throttleMinute(t time.Time) int64 { return t.Unix() / 60 }

// sortedThrottles is sums as counts, sorted by group, slug, then limit.
func sortedThrottles(sums map[ThrottleKey]int64) []ThrottleCount {
	out := make([]ThrottleCount, 0, len(sums))
	for k, n := range sums {
		out = append(out, ThrottleCount{ThrottleKey: k, Count: n})
	}
	slices.SortFunc(out, func(a, b ThrottleCount) int {
		for _, c := range [][2]string{{a.GroupID, b.GroupID}, {a.Slug, b.Slug}, {a.By, b.By}, {a.SourceGroup, b.SourceGroup}, {a.Type, b.Type}, {a.Unit, b.Unit}} {
			if d := strings.Compare(c[0], c[1]); d != 0 {
				return d
			}
		}
		return 0
	})
	return out
}
