package apikey

import (
	"math"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/api/ids"
)

func TestMint(t *testing.T) {
	seen := map[string]bool{}
	for _, kind := range []string{Federated, Workspace} {
		for range 100 {
			k, err := Mint(kind)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(k, kind) || len(k) != PrefixLen+1+SecretLen || k[PrefixLen] != '.' {
				t.Fatalf("Mint(%q) = %q: want %s + %d chars + '.' + %d chars", kind, k, kind, PrefixLen-len(kind), SecretLen)
			}
			if seen[Prefix(k)] {
				t.Fatalf("prefix %q minted twice", Prefix(k))
			}
			seen[Prefix(k)] = true
			if Entropy(k) < MinEntropy {
				t.Errorf("minted key %q has entropy %.2f, below what registration demands", k, Entropy(k))
			}
		}
	}
	if _, err := Mint("0123456789abcdef"); err == nil {
		t.Error("Mint accepted a kind as long as the whole prefix")
	}
	// Mint draws the prefix's random part as the table's key rows write it down.
	for _, k := range []ids.Kind{ids.FederatedKey, ids.WorkspaceKey} {
		if len(k.Prefix)+k.Len != PrefixLen || k.Alphabet != ids.Base62 {
			t.Errorf("ids row %+v disagrees with the %d-character base62 prefix Mint draws", k, PrefixLen)
		}
	}
}

func TestPrefixAndHash(t *testing.T) {
	if got := Prefix("short"); got != "short" {
		t.Errorf("Prefix(short) = %q", got)
	}
	if got := Prefix("abcdefghijklmnopqrstuvwxyz"); got != "abcdefghijklmnop" {
		t.Errorf("Prefix = %q, want the first 16 characters", got)
	}
	// SHA-256 of "abc", from FIPS 180-2.
	if got := Hash("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("Hash(abc) = %s", got)
	}
}

func TestEntropy(t *testing.T) {
	cases := []struct {
		in   string
		want float64
	}{
		{"", 0},
		{"aaaa", 0},
		{"abab", 1},
		{"abcd", 2},
		{"abcdefgh", 3},
	}
	for _, tc := range cases {
		if got := Entropy(tc.in); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Entropy(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
