// Package providertest holds what the tests of the translating providers share: golden files under testdata,
// rewritten with -update, and JSON indented to read them.
package providertest

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/view"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.* from the current translation")

// Golden compares got with testdata/name, or rewrites it under -update.
func Golden(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the translation:\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// Indent is b, a JSON value, indented, with a final newline.
func Indent(t testing.TB, b []byte) []byte {
	t.Helper()
	v := jsontext.Value(bytes.Clone(b))
	if err := v.Indent(jsontext.WithIndent("  ")); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return append(v, '\n')
}

// Inputs are the names of testdata/*suffix, without the suffix, and each one's bytes.
func Inputs(t testing.TB, suffix string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*"+suffix))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no testdata/*%s", suffix)
	}
	out := make(map[string][]byte, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), suffix)] = b
	}
	return out
}

// SSE frames chunks as Forward sends them: one "data: <chunk>" event each.
func SSE(chunks [][]byte) []byte {
	var b []byte
	for _, c := range chunks {
		b = append(append(append(b, "data: "...), c...), "\n\n"...)
	}
	return b
}

// Read is testdata/name.
func Read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SplitText cuts s into n pieces (some empty) at rune boundaries, for a fuzz target to stream.
func SplitText(s string, n int) []string {
	r := []rune(strings.ToValidUTF8(s, "?"))
	out := make([]string, n)
	for i := range n {
		out[i] = string(r[i*len(r)/n : (i+1)*len(r)/n])
	}
	return out
}

// TextInto is an emit function for a Translation's Stream that appends the text of each OpenAI chunk to text,
// and fails t on a chunk that is not one.
func TextInto(t testing.TB, text *strings.Builder) func([]byte) error {
	return func(b []byte) error {
		var c openai.ChatChunk
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("chunk %q: %v", b, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
		}
		return nil
	}
}

// RequestGolden translates each testdata/<name>.request.json with p for target, on the route route(name) gives,
// and compares the call (its URL, then its body) with testdata/<name>.request.golden.json; a chat call is
// translated streamed too, against <name>.stream.request.golden.json.
func RequestGolden(t *testing.T, p provider.Provider, target *view.Target, route func(name string) string) {
	in := Inputs(t, ".request.json")
	for _, name := range slices.Sorted(maps.Keys(in)) {
		t.Run(name, func(t *testing.T) {
			r := route(name)
			for _, stream := range []bool{false, true} {
				if stream && r != "/chat/completions" {
					continue
				}
				url, out, err := p.Request(target, provider.Call{Route: r, Body: in[name], Stream: stream})
				if err != nil {
					t.Fatal(err)
				}
				suffix := ""
				if stream {
					suffix = ".stream"
				}
				Golden(t, name+suffix+".request.golden.json", append([]byte("POST "+url+"\n"), Indent(t, out)...))
			}
		})
	}
}

// SameJSON fails t unless got and want hold the same JSON value, whatever the spacing and member order. (It
// decodes both itself: a gatewayd package may not import test/testutil, test/layers.)
func SameJSON(t testing.TB, what string, got, want []byte) {
	t.Helper()
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil || !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, got, bytes.TrimSpace(want))
	}
}
