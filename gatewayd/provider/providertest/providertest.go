// Package providertest holds what the tests of the translating providers share: golden files under testdata,
// rewritten with -update, and JSON indented to read them.
package providertest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
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
