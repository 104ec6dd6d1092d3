package resttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Response is one HTTP exchange.
type Response struct {
	Code   int
	Header http.Header
	Raw    []byte
	// Body is Raw decoded when it is a JSON object.
	Body map[string]any
}

func (r Response) String() string { return fmt.Sprintf("%d %s", r.Code, r.Raw) }

// Call sends one request to srv with key as its bearer token (none when empty) and headers as name, value
// pairs. body is marshalled unless it is a []byte or string, which are sent as is.
func Call(srv *httptest.Server, key, method, path string, body any, headers ...string) Response {
	ginkgo.GinkgoHelper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		Expect(err).NotTo(HaveOccurred())
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(Ctx, method, srv.URL+path, rd)
	Expect(err).NotTo(HaveOccurred())
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	out := Response{Code: resp.StatusCode, Header: resp.Header, Raw: raw}
	if len(raw) > 0 && raw[0] == '{' {
		Expect(json.Unmarshal(raw, &out.Body)).To(Succeed(), "body %s", raw)
	}
	return out
}

// ExpectError asserts a 4xx in the envelope with the given status and error_code.
func ExpectError(r Response, status int, code string) {
	ginkgo.GinkgoHelper()
	Expect(r.Code).To(Equal(status), "response %s", r)
	Expect(r.Body).To(HaveKeyWithValue("error_code", code), "response %s", r)
	Expect(r.Body).To(HaveKey("detail"))
	Expect(r.Body["error"]).NotTo(BeEmpty())
	Conform("Error", r.Raw)
}
