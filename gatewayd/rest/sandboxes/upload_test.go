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

func TestCheckImage(t *testing.T) {
	prod, dev := &service{}, &service{opts: Options{AllowInternalImages: true}}
	tests := []struct {
		ref       string
		prod, dev bool // accepted
	}{
		{"ghcr.io/org/app:1.2", true, true},
		{"docker.io/library/python:3.12", true, true},
		{"registry.example.com:5000/a/b@sha256:" + strings.Repeat("a", 64), true, true},
		{"127.0.0.1:5000/x:1", false, true},
		{"localhost:5000/x:1", false, true},
		{"169.254.169.254/latest:1", false, true},
		{"10.0.0.8:5000/x", false, true},
		{"[::1]:5000/x", false, true},
		{"python:3.12", false, false},       // no registry hostname
		{"library/python", false, false},    // no registry hostname
		{"ghcr.io/Org/App:1", false, false}, // not a reference (uppercase repository)
		{"ghcr.io/org/app:", false, false},  // empty tag
		{strings.Repeat("a", 1100), false, false},
		// A path a proxy would rewrite into another repository (docs/security.md "Registry paths are bound to
		// their workspace").
		{"ghcr.io/org/app/../other/app:1", false, false},
		{"127.0.0.1:5000/sandboxes/red/../blue/agent:v1", false, false},
		{"127.0.0.1:5000//sandboxes/blue/agent:v1", false, false},
		{"ghcr.io/org/./app:1", false, false},
	}
	for _, tc := range tests {
		if err := prod.checkImage(tc.ref); (err == nil) != tc.prod {
			t.Errorf("production checkImage(%q) = %v, want accepted=%v", tc.ref, err, tc.prod)
		}
		if err := dev.checkImage(tc.ref); (err == nil) != tc.dev {
			t.Errorf("development checkImage(%q) = %v, want accepted=%v", tc.ref, err, tc.dev)
		}
	}
}
