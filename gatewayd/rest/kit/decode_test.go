package kit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// refusedField is the status and the first field named by the answer w recorded.
func refusedField(t *testing.T, w *httptest.ResponseRecorder) (int, string) {
	t.Helper()
	var body struct {
		Detail []struct{ Field string } `json:"detail"`
	}
	if w.Code == http.StatusOK || json.Unmarshal(w.Body.Bytes(), &body) != nil || len(body.Detail) == 0 {
		return w.Code, ""
	}
	return w.Code, body.Detail[0].Field
}

// TestDecodeBytesRefusesDuplicateMembers: a member given twice, at any depth, is 400 naming it in the API's
// notation; the same names in different objects are not duplicates.
func TestDecodeBytesRefusesDuplicateMembers(t *testing.T) {
	type item struct {
		Slug string `json:"slug"`
	}
	type body struct {
		Name  string `json:"name"`
		Items []item `json:"items"`
		Meta  *struct {
			ID string `json:"id"`
		} `json:"meta"`
	}
	for raw, want := range map[string]string{
		`{"name": "a", "name": "b"}`:                             "name",
		`{"name": "a", "name": "a"}`:                             "name",
		`{"items": [{"slug": "a"}, {"slug": "b", "slug": "c"}]}`: "items[1].slug",
		`{"meta": {"id": "a", "id": "b"}}`:                       "meta.id",
		`{"name": "a", "items": [{"slug": "a"}, {"slug": "a"}]}`: "",
	} {
		w := httptest.NewRecorder()
		var v body
		ok := DecodeBytes(w, []byte(raw), &v, false)
		code, field := refusedField(t, w)
		if want == "" {
			if !ok {
				t.Errorf("%s refused: %d %s", raw, code, w.Body)
			}
			continue
		}
		if ok || code != http.StatusBadRequest || field != want {
			t.Errorf("%s: ok %v, %d naming %q, want 400 naming %q", raw, ok, code, field, want)
		}
	}
}

// TestQueryAndHeaderOnce: a parameter or header read once is its value, "" when absent, and 400 naming it when
// given twice, even with the same value twice.
func TestQueryAndHeaderOnce(t *testing.T) {
	for _, tc := range []struct {
		query   string
		headers []string
		want    string
		refused string
	}{
		{query: "", want: ""},
		{query: "team_id=red", want: "red"},
		{query: "team_id=red&team_id=blue", refused: "team_id"},
		{query: "team_id=red&team_id=red", refused: "team_id"},
		{headers: []string{"red"}, want: "red"},
		{headers: []string{"red", "blue"}, refused: "X-Team-Id"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/?"+tc.query, nil)
		for _, h := range tc.headers {
			r.Header.Add("X-Team-Id", h)
		}
		read, name := Query, "team_id"
		if tc.headers != nil {
			read, name = Header, "X-Team-Id"
		}
		w := httptest.NewRecorder()
		got, ok := read(w, r, name)
		code, field := refusedField(t, w)
		switch {
		case tc.refused != "" && (ok || code != http.StatusBadRequest || field != tc.refused):
			t.Errorf("%q %v: ok %v, %d naming %q, want 400 naming %s", tc.query, tc.headers, ok, code, field, tc.refused)
		case tc.refused == "" && (!ok || got != tc.want):
			t.Errorf("%q %v: %q, %v, want %q", tc.query, tc.headers, got, ok, tc.want)
		}
	}
}
