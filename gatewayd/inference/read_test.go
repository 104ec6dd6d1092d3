package inference

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestPredictBody(t *testing.T) {
	small := strings.Repeat("a", 100)
	big := strings.Repeat("b", maxPrereadBody+1)
	for _, tc := range []struct {
		name          string
		body          string
		contentLength int64
		inMemory      bool
		want          string
		wantErr       error
	}{
		{"small, read first", small, 100, true, small, nil},
		{"64 KiB, read first", big[:maxPrereadBody], maxPrereadBody, true, big[:maxPrereadBody], nil},
		{"over 64 KiB, streamed", big, int64(len(big)), false, big, nil},
		{"unknown length, streamed", small, -1, false, small, nil},
		{"empty", "", 0, false, "", nil},
		// A small body that does not arrive whole never reaches the model: the read's error, and no body.
		{"shorter than declared: the error, nothing to forward", "abcd", 10, false, "", io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReader(tc.body)
			got, err := predictBody(struct{ io.Reader }{src}, tc.contentLength)
			if err != nil || tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || got != nil {
					t.Errorf("body %v, error %v; want no body, error %v", got, err, tc.wantErr)
				}
				return
			}
			if _, ok := got.(*bytes.Reader); ok != tc.inMemory {
				t.Errorf("in memory = %v, want %v", ok, tc.inMemory)
			}
			b, err := io.ReadAll(got)
			if string(b) != tc.want || err != nil {
				t.Errorf("read %d bytes, error %v; want %d bytes, error %v", len(b), err, len(tc.want), tc.wantErr)
			}
		})
	}
}
