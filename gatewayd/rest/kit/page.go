package kit

import (
	"encoding/base64"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Pagination does not hand out apiserver continue tokens, which expire after a few minutes. Every list is
// sorted by an immutable key (an object's name, or a key's prefix) and the cursor is the opaque base64 of the
// last key returned; the next page is the keys greater than it. A cursor therefore never expires, and an object
// that exists for the whole drain is returned exactly once, whatever is created or deleted meanwhile.

const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

type Page struct {
	limit int
	after string // the last key of the previous page, "" for the first
}

type PaginationJSON struct {
	HasMore bool    `json:"has_more"`
	Cursor  *string `json:"cursor"`
}

type PageJSON[T any] struct {
	Items      []T            `json:"items"`
	Pagination PaginationJSON `json:"pagination"`
}

// ParsePage reads limit and cursor, answering 400 when either is invalid or given twice.
func ParsePage(w http.ResponseWriter, r *http.Request) (Page, bool) {
	p := Page{limit: defaultPageSize}
	var ok bool
	if p.limit, ok = ParseLimit(w, r); !ok {
		return p, false
	}
	s, ok := Query(w, r, "cursor")
	if !ok {
		return p, false
	}
	if s != "" {
		raw, err := base64.RawURLEncoding.DecodeString(s)
		after, ok := strings.CutPrefix(string(raw), "v1:")
		if err != nil || !ok || after == "" {
			BadCursor(w)
			return p, false
		}
		p.after = after
	}
	return p, true
}

// ParseLimit reads the page size of every list route, limit: 1 to 1000, 100 when absent. It answers 400
// invalid_request naming limit when it is anything else or given twice.
func ParseLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	s, ok := Query(w, r, "limit")
	if !ok {
		return 0, false
	}
	if s == "" {
		return defaultPageSize, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxPageSize {
		BadRequest(w, "limit", "limit must be an integer from 1 to 1000.")
		return 0, false
	}
	return n, true
}

// BadCursor answers 400 invalid_request naming cursor: one the route did not hand out.
func BadCursor(w http.ResponseWriter) {
	BadRequest(w, "cursor", "cursor is not one this API returned; pass the previous page's pagination.cursor unchanged.")
}

func encodeCursor(last string) *string {
	s := base64.RawURLEncoding.EncodeToString([]byte("v1:" + last))
	return &s
}

// Slice returns the indexes into keys (sorted ascending) of the page, and whether more follow.
func (p Page) Slice(keys []string) ([]int, bool) {
	start := sort.SearchStrings(keys, p.after)
	for start < len(keys) && p.after != "" && keys[start] <= p.after {
		start++
	}
	end := min(start+p.limit, len(keys))
	idx := make([]int, 0, end-start)
	for i := start; i < end; i++ {
		idx = append(idx, i)
	}
	return idx, end < len(keys)
}

// NewPage builds the envelope; the cursor is null once the list is drained.
func NewPage[T any](items []T, more bool, keys []string, sel []int) PageJSON[T] {
	out := PageJSON[T]{Items: items, Pagination: PaginationJSON{HasMore: more}}
	if more && len(sel) > 0 {
		out.Pagination.Cursor = encodeCursor(keys[sel[len(sel)-1]])
	}
	return out
}

// ValidName is true for a valid Kubernetes object name, the form of every id in a path.
func ValidName(id string) bool {
	return id != "" && len(validation.IsDNS1123Subdomain(id)) == 0
}

// ValidPrefix is true for a possible key prefix: 16 printable ASCII characters without spaces.
func ValidPrefix(p string) bool {
	if len(p) != 16 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '!' || p[i] > '~' {
			return false
		}
	}
	return true
}
