// Package ocitest holds what tests of images read back from a registry share.
package ocitest

import (
	"archive/tar"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FileIn answers the content of the file at path in layer l, or "" when the layer has no such file.
func FileIn(t testing.TB, l v1.Layer, path string) string {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			return ""
		}
		if h.Name == path {
			b, _ := io.ReadAll(tr)
			return string(b)
		}
	}
}
