package billing

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"
	"time"
)

// Counters are the usage of some calls: every call recorded, the 429s among them, the tokens the answers
// reported (a 429 reports none), and what they cost: the sum of their events' costMicroUsd.
type Counters struct {
	Requests     int64 `json:"requests"`
	Throttled    int64 `json:"throttled"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	CostMicroUsd int64 `json:"cost_micro_usd"`
}

// Add adds o to c.
func (c *Counters) Add(o Counters) {
	c.Requests += o.Requests
	c.Throttled += o.Throttled
	c.InputTokens += o.InputTokens
	c.OutputTokens += o.OutputTokens
	c.CostMicroUsd += o.CostMicroUsd
}

// UsageMinute is one minute of the usage rollup: the counters of the calls of one slug in one minute.
type UsageMinute struct {
	// Minute is the minute's start, UTC.
	Minute time.Time
	Slug   string
	Counters
}

// UsageBucket is the width of a usage rollup counter: calls are counted per minute.
const UsageBucket = time.Minute

// UsageKeep is how long the usage rollup keeps a minute's counters: the longest window served is a day, and the
// extra hour leaves room for a clock that differs between replicas.
const UsageKeep = 25 * time.Hour

// AllGroups is the group under which the usage rollup keeps the workspace's total of each slug, every group's
// calls together. Group ids are Kubernetes names, so no group is called this.
const AllGroups = "*"

// usageOf is the counters one record adds to the usage rollup.
func usageOf(r *Record) Counters {
	c := Counters{Requests: 1, InputTokens: r.Event.Tokens.InputTokens, OutputTokens: r.Event.Tokens.OutputTokens, CostMicroUsd: r.Event.CostMicroUsd}
	if r.Event.StatusCode == 429 {
		c.Throttled = 1
	}
	return c
}

// usageGroups are the rollup rows a record adds to: the workspace's total and, when the event names one, its group's.
func usageGroups(r *Record) []string {
	if r.Event.GroupID == "" {
		return []string{AllGroups}
	}
	return []string{AllGroups, r.Event.GroupID}
}

// encodeCounters and decodeCounters are the embedded store's value of a usage counter: five big-endian uint64,
// the cost last. A value of four, written before the rollup counted cost, reads with a cost of 0.
func encodeCounters(c Counters) []byte {
	b := make([]byte, 0, 40)
	for _, n := range []int64{c.Requests, c.Throttled, c.InputTokens, c.OutputTokens, c.CostMicroUsd} {
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return b
}

func decodeCounters(b []byte) (Counters, bool) {
	if len(b) != 32 && len(b) != 40 {
		return Counters{}, false
	}
	n := func(i int) int64 {
		if 8*i >= len(b) {
			return 0
		}
		return int64(binary.BigEndian.Uint64(b[8*i:]))
	}
	return Counters{Requests: n(0), Throttled: n(1), InputTokens: n(2), OutputTokens: n(3), CostMicroUsd: n(4)}, true
}

// usageRow is a (minute, slug) of the rollup while it is summed.
type usageRow struct {
	minute int64
	slug   string
}

// sortedUsage is sums as minutes, sorted by minute, then slug.
func sortedUsage(sums map[usageRow]Counters) []UsageMinute {
	out := make([]UsageMinute, 0, len(sums))
	for k, c := range sums {
		out = append(out, UsageMinute{Minute: time.Unix(k.minute*60, 0).UTC(), Slug: k.slug, Counters: c})
	}
	slices.SortFunc(out, func(a, b UsageMinute) int {
		return cmp.Or(a.Minute.Compare(b.Minute), strings.Compare(a.Slug, b.Slug))
	})
	return out
}
