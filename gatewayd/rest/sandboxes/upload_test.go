package sandboxes

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// zeros is an endless reader of zero bytes: a large body is generated, never allocated.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A body without Content-Length is cut off by the cap itself, while it streams.
func TestCappedReader(t *testing.T) {
	tests := []struct {
		name     string
		size     int64
		cap      int64
		exceeded bool
	}{
		{"below the cap", 10, 11, false},
		{"at the cap", 11, 11, false},
		{"one byte past the cap", 12, 11, true},
		{"5 GB + 1 byte against the 5 GB cap", DefaultMaxUploadBytes + 1, DefaultMaxUploadBytes, true},
		{"5 GB against the 5 GB cap", DefaultMaxUploadBytes, DefaultMaxUploadBytes, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &cappedReader{r: io.LimitReader(zeros{}, tc.size), left: tc.cap}
			n, err := io.CopyBuffer(io.Discard, c, make([]byte, 1<<20))
			if c.exceeded != tc.exceeded {
				t.Fatalf("exceeded = %v after %d bytes, want %v", c.exceeded, n, tc.exceeded)
			}
			if tc.exceeded {
				if !errors.Is(err, errTooLarge) || n > tc.cap+1 {
					t.Fatalf("read %d bytes, err %v; want errTooLarge by byte %d", n, err, tc.cap+1)
				}
				return
			}
			if err != nil || n != tc.size {
				t.Fatalf("read %d bytes, err %v; want all %d", n, err, tc.size)
			}
		})
	}
}

func TestSignature(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	base := sign(key, "ns", "sib-1", 100)
	for name, other := range map[string][]byte{
		"another namespace": sign(key, "nt", "sib-1", 100),
		"another build":     sign(key, "ns", "sib-2", 100),
		"another expiry":    sign(key, "ns", "sib-1", 101),
		"another key":       sign([]byte(strings.Repeat("j", 32)), "ns", "sib-1", 100),
		// The fields are separated, so moving a character across a boundary changes the signature.
		"shifted boundary": sign(key, "nss", "ib-1", 100),
	} {
		if string(other) == string(base) {
			t.Errorf("%s signs the same", name)
		}
	}
}
