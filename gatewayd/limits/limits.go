// Package limits is gatewayd's limit engine: it decides, for one (group, slug) call, whether every applicable
// rate and usage limit has room, and charges them all together or not at all. Counters live behind the Store
// interface so that the same Plan can be enforced in memory (this package), in Redis (one Lua script per
// check) or with DAY counters persisted in bbolt. Plans are built once per snapshot load, off the hot path;
// counters are keyed by (namespace, metering group, slug, type, unit) and never by snapshot, so a threshold
// change applies at once and keeps the counts already made.
package limits

import (
	"context"
	"fmt"
	"slices"
	"time"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Type is what a limit counts.
type Type uint8

const (
	// Request counts calls; it is charged before forwarding.
	Request Type = iota
	// Token counts prompt plus completion tokens; it refuses when exhausted and is charged after the response.
	Token
	// Cost counts the calls' cost in micro-USD, as Token counts tokens: it refuses when exhausted and is charged
	// after the response. It is a usage limit only (Day or Month).
	Cost
	numTypes
)

// numRollTypes are the types a rolling window (Second, Minute) counts: Request and Token.
const numRollTypes = Cost

// Unit is the window of a limit.
type Unit uint8

const (
	// Second is a rolling one-second window.
	Second Unit = iota
	// Minute is a rolling one-minute window.
	Minute
	// Day is the calendar day in UTC, reset at midnight.
	Day
	// Month is the calendar month in UTC, reset at the first instant of the month.
	Month
	numUnits
)

// Calendar reports whether u is a calendar unit (Day or Month): a count that returns to zero when its period
// turns over, rather than a rolling window.
func (u Unit) Calendar() bool { return u == Day || u == Month }

// Period is the number of u's calendar period that holds t: the UTC day since the epoch for Day, the UTC month
// since January 1970 for Month. It is meaningless for a rolling unit.
func (u Unit) Period(t time.Time) int64 {
	if u == Month {
		y, m, _ := t.UTC().Date()
		return int64(y-1970)*12 + int64(m) - 1
	}
	return t.UnixNano() / nanosPerDay
}

// PeriodEnd is the first instant after the calendar period of u that holds t: the next midnight UTC for Day, the
// first instant of the next month (UTC) for Month. The usage route's reset_at and a refusal's Retry-After.
func (u Unit) PeriodEnd(t time.Time) time.Time {
	t = t.UTC()
	if u == Month {
		return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
}

// typeNames and unitNames are the API names (gatewayv1's) of the types and units; the numbering is this package's,
// and its stored counters' (a Redis bucket's index, a bbolt key's name).
var (
	typeNames = [numTypes]gatewayv1.LimitType{Request: gatewayv1.LimitTypeRequest, Token: gatewayv1.LimitTypeToken, Cost: gatewayv1.LimitTypeCost}
	unitNames = [numUnits]gatewayv1.LimitUnit{Second: gatewayv1.UnitSecond, Minute: gatewayv1.UnitMinute, Day: gatewayv1.UnitDay, Month: gatewayv1.UnitMonth}
)

// String returns the API name of the type.
func (t Type) String() string {
	if t < numTypes {
		return string(typeNames[t])
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// String returns the API name of the unit.
func (u Unit) String() string {
	if u < numUnits {
		return string(unitNames[u])
	}
	return fmt.Sprintf("Unit(%d)", uint8(u))
}

// ParseType parses an API type name.
func ParseType(s string) (Type, error) {
	if i := slices.Index(typeNames[:], gatewayv1.LimitType(s)); i >= 0 {
		return Type(i), nil
	}
	return 0, fmt.Errorf("unknown limit type %q: want REQUEST, TOKEN or COST", s)
}

// ParseUnit parses an API unit name.
func ParseUnit(s string) (Unit, error) {
	if i := slices.Index(unitNames[:], gatewayv1.LimitUnit(s)); i >= 0 {
		return Unit(i), nil
	}
	return 0, fmt.Errorf("unknown limit unit %q: want SECOND, MINUTE, DAY or MONTH", s)
}

// BucketKey names one counter. It is independent of the snapshot, so counts survive a reload.
type BucketKey struct {
	Namespace string
	// Group is the metering group: the caller's own group in INDEPENDENT mode, the declaring group in CASCADING.
	Group string
	Slug  string
	Type  Type
	Unit  Unit
}

// Limit is one enforced ceiling and the bucket it charges.
type Limit struct {
	Key       BucketKey
	Threshold int64
	// SourceGroup is the group that declared the threshold, reported in a 429.
	SourceGroup string
}

// Plan is every limit that applies to calls of one (group, slug), nearest group first, so that the first limit
// hit is the one reported. A Plan is immutable once bound; Handle holds the Store's precomputed references.
type Plan struct {
	Limits []Limit
	// Handle is set by Store.Bind and read only by that Store.
	Handle any
}

// Result is the outcome of Admit.
type Result struct {
	// Allowed is true when every limit had room and the REQUEST buckets were charged.
	Allowed bool
	// Hit is the index in Plan.Limits of the first limit that refused, -1 when allowed.
	Hit int
	// RetryAfter is when the refusing bucket is expected to have room again.
	RetryAfter time.Duration
}

// Charge is what a call used, known once its answer is in: Settle adds Tokens to the plan's TOKEN buckets and
// Cost to its COST buckets.
type Charge struct {
	// Tokens are the prompt plus completion tokens the upstream reported.
	Tokens int64
	// Cost is the call's cost in micro-USD; 0 for a call to an unpriced target, which never trips a COST limit.
	Cost int64
}

// amount is what c charges to a bucket of type t.
func (c Charge) amount(t Type) int64 {
	switch t {
	case Token:
		return c.Tokens
	case Cost:
		return c.Cost
	}
	return 0
}

// Store keeps the counters. Implementations must make Admit all-or-nothing across every bucket of the plan:
// either every REQUEST bucket is charged by one, or nothing is.
type Store interface {
	// Bind precomputes the store's references for the buckets of p (for example pointers, or Redis keys and
	// the script's arguments). It is called once per snapshot load, never on the hot path.
	Bind(p *Plan) error
	// Admit checks every limit of p at now: a REQUEST limit needs room for one more call, a TOKEN or COST limit
	// must not be exhausted. When all pass, it charges one to every REQUEST bucket.
	Admit(ctx context.Context, p *Plan, now time.Time) (Result, error)
	// Settle charges c.Tokens to every TOKEN bucket of p and c.Cost to every COST bucket, after the response
	// reported them, all together. It never refuses.
	Settle(ctx context.Context, p *Plan, c Charge, now time.Time) error
	// Count is the current count of bucket k at now, 0 when it was never charged. It serves reports such as
	// the usage endpoint, never the hot path.
	Count(ctx context.Context, k BucketKey, now time.Time) (int64, error)
}

// Empty reports whether a plan has no limit, so callers can skip the store.
func (p *Plan) Empty() bool { return p == nil || len(p.Limits) == 0 }
