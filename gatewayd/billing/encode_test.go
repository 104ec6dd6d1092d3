package billing

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
	"github.com/modelgate/modelgate/test/testutil"
	bolt "go.etcd.io/bbolt"
)

// trickyStrings are strings encoding/json escapes, or leaves as they are, in ways a hand-written encoder can miss.
var trickyStrings = []string{
	"", "evt_0123456789abcdef01234567", `<script>alert("x")</script> & more`, `quote " and backslash \\ and slash /`,
	"\x00\x01\x07\b\t\n\v\f\r\x1b\x1f\x7f", "line\u2028separator\u2029paragraph", "emoji 😀🇫🇷, é, ß, 中文",
	"invalid \xff\xfe utf-8 \xc3", "truncated \xe2\x80", "surrogate \xed\xa0\x80 half", "nul\x00end", "\u00a0\ufeff\ufffd",
}

// trickyTimes are timestamps for the same purpose, json.Marshal's failures included.
var trickyTimes = []time.Time{
	{}, t0, time.Date(2026, 3, 14, 10, 0, 0, 123456789, time.UTC), time.Date(2026, 3, 14, 10, 0, 0, 120000000, time.UTC),
	time.Date(2026, 3, 14, 10, 0, 0, 1, time.FixedZone("CET", 3600)),
	time.Date(2026, 3, 14, 10, 0, 0, 500, time.FixedZone("", -(9*3600+30*60))),
	time.Date(2026, 3, 14, 10, 0, 0, 0, time.FixedZone("", 5*3600+45*60+30)), // seconds in the offset: RFC 3339 drops them
	time.Date(2026, 3, 14, 10, 0, 0, 0, time.FixedZone("", 23*3600+59*60)),
	time.Date(2026, 3, 14, 10, 0, 0, 0, time.FixedZone("", 24*3600)),  // json.Marshal fails
	time.Date(2026, 3, 14, 10, 0, 0, 0, time.FixedZone("", -25*3600)), // json.Marshal fails
	time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
	time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), // json.Marshal fails
	time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),    // json.Marshal fails
	time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
	time.Date(2026, 3, 14, 10, 0, 0, 0, time.Local),
	time.Now(), // with a monotonic reading, which neither writes
}

// checkAppendEvent fails t unless appendEvent, after a prefix, gives json.Marshal's bytes, or json.Marshal's error.
func checkAppendEvent(t *testing.T, e *Event) {
	t.Helper()
	want, wantErr := json.Marshal(e)
	prefix := []byte("prefix")
	got, err := appendEvent(prefix, e)
	switch {
	case wantErr != nil || err != nil:
		if wantErr == nil || err == nil || err.Error() != wantErr.Error() {
			t.Fatalf("appendEvent(%#v) failed with %v, json.Marshal with %v", e, err, wantErr)
		}
		if !bytes.Equal(got, prefix) {
			t.Fatalf("appendEvent(%#v) failed, and changed dst to %q", e, got)
		}
	case !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want):
		t.Fatalf("appendEvent(%#v)\n = %s\nwant %s%s", e, got, prefix, want)
	}
}

// TestAppendEventIsJSONMarshal: appendEvent writes what json.Marshal writes, byte for byte, for every tricky
// string in every field, every tricky time and extreme numbers.
func TestAppendEventIsJSONMarshal(t *testing.T) {
	base := Event{
		IdempotencyKey: "evt_0123", Timestamp: t0, RequestID: "req_0123", ModelSlug: "slug", ExternalEntityID: "ent",
		GroupID: "grp", APIKeyPrefix: "mgk_0000", StatusCode: 200, Tokens: Tokens{InputTokens: 12, OutputTokens: 34},
		CostMicroUsd: 56,
	}
	fields := []func(*Event) *string{
		func(e *Event) *string { return &e.IdempotencyKey }, func(e *Event) *string { return &e.RequestID },
		func(e *Event) *string { return &e.ModelSlug }, func(e *Event) *string { return &e.ExternalEntityID },
		func(e *Event) *string { return &e.GroupID }, func(e *Event) *string { return &e.APIKeyPrefix },
		func(e *Event) *string { return &e.Target }, func(e *Event) *string { return &e.Provider },
	}
	for _, f := range fields {
		for _, s := range trickyStrings {
			e := base
			*f(&e) = s
			checkAppendEvent(t, &e)
		}
	}
	for _, ts := range trickyTimes {
		e := base
		e.Timestamp = ts
		checkAppendEvent(t, &e)
	}
	for _, n := range []int64{0, -1, 1, math.MaxInt64, math.MinInt64, math.MaxInt32 + 1, -1e15} {
		e := base
		e.StatusCode, e.Tokens.InputTokens, e.Tokens.OutputTokens, e.Attempts, e.CostMicroUsd = int(n), n, -n, int(n), n
		checkAppendEvent(t, &e)
	}
	checkAppendEvent(t, &Event{})
	var all Event
	for i, f := range fields {
		*f(&all) = trickyStrings[(i+2)%len(trickyStrings)] + trickyStrings[(i+5)%len(trickyStrings)]
	}
	checkAppendEvent(t, &all)
}

// FuzzAppendEvent compares appendEvent with json.Marshal on any strings, time and numbers; its seeds are the
// tricky strings and times of TestAppendEventIsJSONMarshal.
func FuzzAppendEvent(f *testing.F) {
	for i, s := range trickyStrings {
		ts := trickyTimes[i%len(trickyTimes)]
		_, off := ts.Zone()
		f.Add(s, trickyStrings[(i+1)%len(trickyStrings)], ts.Unix(), int64(ts.Nanosecond()), off, 200+i, int64(i)<<40, -int64(i))
	}
	for _, ts := range trickyTimes {
		_, off := ts.Zone()
		f.Add("evt_0123", "ent", ts.Unix(), int64(ts.Nanosecond()), off, 429, int64(math.MaxInt64), int64(math.MinInt64))
	}
	f.Fuzz(func(t *testing.T, s1, s2 string, sec, nsec int64, offset, status int, in, out int64) {
		loc := time.UTC
		if offset != 0 {
			loc = time.FixedZone("z", offset)
		}
		e := Event{
			IdempotencyKey: s1, Timestamp: time.Unix(sec, nsec).In(loc), RequestID: s2, ModelSlug: s1 + s2,
			ExternalEntityID: s2 + s1, GroupID: s1, APIKeyPrefix: s2, StatusCode: status,
			Tokens: Tokens{InputTokens: in, OutputTokens: out}, CostMicroUsd: in ^ out, Target: s2, Provider: s1, Attempts: status,
		}
		checkAppendEvent(t, &e)
	})
}

// bulkyRecords are a batch whose events outgrow the buffer the stores encode a batch into several times over, of
// two namespaces, alternately for the outbox or not, and each with tricky strings.
func bulkyRecords() []Record {
	var recs []Record
	for i := range 50 {
		recs = append(recs, Record{Namespace: []string{"ns", "other"}[i/25], Deliver: i%2 == 0, Event: Event{
			IdempotencyKey: fmt.Sprintf("evt_%03d", i), Timestamp: t0.Add(time.Duration(i) * time.Millisecond),
			RequestID: strings.Repeat(trickyStrings[i%len(trickyStrings)], i%7), ModelSlug: "slug",
			ExternalEntityID: strings.Repeat("x", i*40), APIKeyPrefix: trickyStrings[(i+3)%len(trickyStrings)],
			StatusCode: 200, Tokens: Tokens{InputTokens: int64(i), OutputTokens: int64(i) << 33}, CostMicroUsd: int64(i) << 20,
		}})
	}
	return recs
}

// wantStored is the JSON of each event of recs in ns, in order, with those for the outbox separately.
func wantStored(t *testing.T, recs []Record, ns string) (events, outbox []string) {
	t.Helper()
	for _, r := range recs {
		if r.Namespace != ns {
			continue
		}
		v, err := json.Marshal(r.Event)
		if err != nil {
			t.Fatal(err)
		}
		if events = append(events, string(v)); r.Deliver {
			outbox = append(outbox, string(v))
		}
	}
	return events, outbox
}

// TestBoltAppendStoresJSONMarshal: every value Append stores, in the events and the outbox, is json.Marshal's
// bytes of its event, when the batch outgrows Append's buffer too.
func TestBoltAppendStoresJSONMarshal(t *testing.T) {
	s := openBolt(t)
	recs := bulkyRecords()
	if err := s.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	values := func(tx *bolt.Tx, top []byte, ns string) (out []string) {
		_ = nsBucket(tx, top, ns).ForEach(func(_, v []byte) error { out = append(out, string(v)); return nil })
		return out
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		for _, ns := range []string{"ns", "other"} {
			events, outbox := wantStored(t, recs, ns)
			if got := values(tx, bucketEvents, ns); !slices.Equal(got, events) {
				t.Errorf("events of %s:\n%q\nwant\n%q", ns, got, events)
			}
			if got := values(tx, bucketOutbox, ns); !slices.Equal(got, outbox) {
				t.Errorf("outbox of %s:\n%q\nwant\n%q", ns, got, outbox)
			}
		}
		return nil
	})
}

// TestRedisAppendStoresJSONMarshal: every value Append adds to the streams, of the events and the outbox, is
// json.Marshal's bytes of its event, when the batch outgrows Append's buffer too.
func TestRedisAppendStoresJSONMarshal(t *testing.T) {
	redistest.Each(t, testRedisAppendStoresJSONMarshal)
}

func testRedisAppendStoresJSONMarshal(t *testing.T, d *redistest.Deployment) {
	s := NewRedis(d.Client(), "enctest")
	ctx := context.Background()
	recs := bulkyRecords()
	if err := s.Append(ctx, recs); err != nil {
		t.Fatal(err)
	}
	values := func(stream string) (out []string) {
		msgs, err := s.client.XRange(ctx, stream, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			v, _ := m.Values["e"].(string)
			out = append(out, v)
		}
		return out
	}
	for _, ns := range []string{"ns", "other"} {
		events, outbox := wantStored(t, recs, ns)
		if got := values(s.events(ns)); !slices.Equal(got, events) {
			t.Errorf("events of %s:\n%q\nwant\n%q", ns, got, events)
		}
		if got := values(s.outbox(ns)); !slices.Equal(got, outbox) {
			t.Errorf("outbox of %s:\n%q\nwant\n%q", ns, got, outbox)
		}
	}
}

// BenchmarkBoltAppend appends batches of 3,000 events of one namespace and slug, half of them for the webhook
// outbox, into a bbolt file opened as gatewayd opens it (a sync per commit), each batch later than the last, as
// the Recorder writes them under load. Per event it reports the time, the process's CPU time (user and system, the
// collector's included: the figure to compare on a shared machine, where the time follows the load and the disk's
// syncs), the allocations and the database's size (the pages its meta page counts, so not rounded up to the
// file's growth step).
func BenchmarkBoltAppend(b *testing.B) {
	const batch = 3000
	db, err := bolt.Open(filepath.Join(b.TempDir(), "b.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	s := NewBolt(db)
	recs := make([]Record, batch)
	for i := range recs {
		digits := fmt.Sprintf("%024x", uint64(i)*0x9e3779b97f4a7c15)
		recs[i] = Record{Namespace: "ws-acme-prod", Deliver: i%2 == 0, Event: Event{
			IdempotencyKey: "evt_" + digits, RequestID: "req_" + digits, ModelSlug: "llama-3-1-8b-instruct",
			ExternalEntityID: fmt.Sprintf("customer-%04d", i%37), GroupID: fmt.Sprintf("grp-%016d", i%5),
			APIKeyPrefix: fmt.Sprintf("mgk_%012d", i%11), StatusCode: 200,
			Tokens: Tokens{InputTokens: int64(200 + i%900), OutputTokens: int64(20 + i%400)},
		}}
	}
	ctx := context.Background()
	at := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	events := 0
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu := testutil.ProcessCPU()
	for b.Loop() {
		for i := range recs {
			at = at.Add(66667 * time.Nanosecond) // 15,000 calls a second
			recs[i].Event.Timestamp = at
		}
		if err := s.Append(ctx, recs); err != nil {
			b.Fatal(err)
		}
		events += batch
	}
	cpu = testutil.ProcessCPU() - cpu
	runtime.ReadMemStats(&after)
	var size int64
	if err := db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(events), "cpu-ns/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(events), "allocs/event")
	b.ReportMetric(float64(size)/float64(events), "dbB/event")
}
