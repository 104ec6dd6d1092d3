package requestlog

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC)

func entry(i int) Entry {
	return Entry{Time: t0.Add(time.Duration(i) * time.Second), Level: LevelInfo, Message: fmt.Sprint(i), RequestID: fmt.Sprint("r", i)}
}

func messages(es []Entry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Message)
	}
	return strings.Join(out, ",")
}

func TestRing(t *testing.T) {
	for _, tc := range []struct {
		name string
		adds int
		want string
	}{
		{"empty", 0, ""},
		{"below the bound", 2, "0,1"},
		{"at the bound", 3, "0,1,2"},
		{"wrapped once", 4, "1,2,3"},
		{"wrapped twice", 7, "4,5,6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New("gw-0", 3, 0)
			for i := range tc.adds {
				l.Add("ns", "v1", entry(i))
			}
			if got := messages(l.Entries("ns", "v1")); got != tc.want {
				t.Errorf("entries = %q, want %q", got, tc.want)
			}
			if got := l.Entries("other", "v1"); got != nil {
				t.Errorf("another namespace's entries = %v, want none", got)
			}
		})
	}
}

// TestEntriesIsACopy: a reader's slice does not change under later writes.
func TestEntriesIsACopy(t *testing.T) {
	l := New("gw-0", 2, 0)
	l.Add("ns", "v1", entry(0))
	l.Add("ns", "v1", entry(1))
	got := l.Entries("ns", "v1")
	l.Add("ns", "v1", entry(2))
	if messages(got) != "0,1" {
		t.Errorf("entries read before a write = %q, want 0,1", messages(got))
	}
}

// TestMaxDeployments: past the bound, the deployment written least recently is forgotten.
func TestMaxDeployments(t *testing.T) {
	l := New("gw-0", 5, 2)
	l.Add("ns", "a", entry(1))
	l.Add("ns", "b", entry(0))
	l.Add("ns", "a", entry(2))
	l.Add("ns", "c", entry(3))
	if got := l.Entries("ns", "b"); got != nil {
		t.Errorf("b (written least recently) = %v, want forgotten", got)
	}
	if messages(l.Entries("ns", "a")) != "1,2" || messages(l.Entries("ns", "c")) != "3" {
		t.Errorf("a = %q, c = %q; want 1,2 and 3", messages(l.Entries("ns", "a")), messages(l.Entries("ns", "c")))
	}
}

func TestLevelOf(t *testing.T) {
	for status, want := range map[int]string{200: LevelInfo, 204: LevelInfo, 302: LevelInfo, 400: LevelWarning, 404: LevelWarning,
		429: LevelWarning, 499: LevelWarning, 500: LevelError, 502: LevelError, 504: LevelError} {
		if got := LevelOf(status); got != want {
			t.Errorf("LevelOf(%d) = %s, want %s", status, got, want)
		}
	}
}

func TestID(t *testing.T) {
	for _, given := range []string{"abc-123", "trace.id_01:x", strings.Repeat("a", 128)} {
		if got := ID(given); got != given {
			t.Errorf("ID(%q) = %q, want it kept", given, got)
		}
	}
	for _, given := range []string{"", strings.Repeat("a", 129), "has space", "new\nline", "<script>", "ünï"} {
		got := ID(given)
		if got == given || !strings.HasPrefix(got, "req_") || len(got) != len("req_")+24 {
			t.Errorf("ID(%q) = %q, want a new req_ id", given, got)
		}
	}
	if ID("") == ID("") {
		t.Error("two new ids are equal")
	}
}
