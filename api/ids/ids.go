// Package ids mints every random identifier modelgate hands out: the names the REST API gives the objects it
// creates, request ids, the async request ids, the request log's instance, dashboard session ids and the
// random parts of API keys. Each kind's prefix, alphabet and length is one row of the table below, and every
// kind is drawn by the same sampler (crypto/rand, without modulo bias), so an id's wire format is written down
// once. Clients and stored data depend on these formats: a row is never changed, only added.
package ids

import "crypto/rand"

// Alphabets of the kinds.
const (
	Hex       = "0123456789abcdef"
	Base36    = "0123456789abcdefghijklmnopqrstuvwxyz"
	Base62    = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	Base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
)

// Kind is the wire format of one kind of id: Prefix, then Len characters of Alphabet.
type Kind struct {
	Prefix   string
	Alphabet string
	Len      int
}

// The kinds. A hex kind of 2n digits is n random bytes in hex, a Base64URL kind of 43 characters the unpadded
// base64url of 32 random bytes, in length and alphabet.
var (
	// Object names the REST API gives what it creates (Kubernetes names: lowercase, about 82 bits).
	Group             = Kind{"grp-", Base36, 16}
	FederatedKeyName  = Kind{"key-", Base36, 16}
	Endpoint          = Kind{"ep-", Base36, 16}
	WorkspaceKeyName  = Kind{"wk-", Base36, 16}
	SandboxImageBuild = Kind{"sib-", Base36, 16}

	// Request is the id of a model call (X-Request-Id, billing events' request_id).
	Request = Kind{"req_", Hex, 24}
	// BillingEvent is a billing event's idempotency key: a model call's is "evt_" and its Request digits.
	BillingEvent = Kind{"evt_", Hex, 24}
	// RequestLog tells one replica's request log from another's (and from its earlier runs).
	RequestLog = Kind{"log_", Hex, 24}
	// AsyncRequest is an async request's request_id.
	AsyncRequest = Kind{"", Hex, 32}
	// AsyncOwner ends the lease owner name of an async dispatcher (host-pid-<8 hex>).
	AsyncOwner = Kind{"", Hex, 8}
	// ChatCompletion names a chat answer that gatewayd translated from another provider's wire (its id, and
	// the ids of tool calls the provider gave none).
	ChatCompletion = Kind{"chatcmpl-", Base62, 24}
	// DashboardSession is a dashboard session id, sealed in the cookie (the store keeps only its SHA-256).
	DashboardSession = Kind{"", Base64URL, 43}

	// The lookup prefix of a minted API key (16 characters) and its secret, after the dot (about 190 bits).
	FederatedKey = Kind{"mgk_", Base62, 12}
	WorkspaceKey = Kind{"mgw_", Base62, 12}
	KeySecret    = Kind{"", Base62, 32}
)

// New returns a new id of kind k.
func New(k Kind) string { return k.Prefix + Random(k.Alphabet, k.Len) }

// read fills b with random bytes; tests replace it.
var read = func(b []byte) { _, _ = rand.Read(b) } // crypto/rand.Read never fails: it crashes the program instead

// Random returns n characters of alphabet (at most 256 characters) drawn from crypto/rand without modulo bias:
// a byte at or above the largest multiple of len(alphabet) that fits in a byte is dropped, so every character is
// equally likely.
func Random(alphabet string, n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	limit := 256 - 256%len(alphabet)
	for len(out) < n {
		read(buf)
		for _, b := range buf {
			if int(b) < limit && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out)
}
