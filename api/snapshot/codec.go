package snapshot

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	json "github.com/go-json-experiment/json"
	kgzip "github.com/klauspost/compress/gzip"
)

// Names of the ConfigMaps that carry a snapshot, and of their entries.
//
// The index ConfigMap IndexName holds DataVersion, DataChecksum, DataChunks and DataFormat. When DataChunks is
// "0" the whole payload is inline in its binaryData[BinaryPayload]. Otherwise chunk i (1..N) is ConfigMap
// ChunkName(i), with DataVersion equal to the index's and the bytes in binaryData[BinaryPayload]; the payload
// is the concatenation of the chunks in order. Chunks are written before the index, so a reader that sees an
// index whose chunks carry another version is looking at a write in flight and waits for the next event.
const (
	IndexName     = "modelgate-snapshot"
	LabelKey      = "gateway.modelgate.io/snapshot"
	LabelIndex    = "index"
	LabelChunk    = "chunk"
	DataVersion   = "version"
	DataChecksum  = "sha256"
	DataChunks    = "chunks"
	DataFormat    = "format"
	BinaryPayload = "snapshot.json.gz"

	// MaxChunkBytes keeps every ConfigMap well under the 1 MiB object limit.
	MaxChunkBytes = 900 * 1024
)

// ChunkName is the name of chunk i (1-based).
func ChunkName(i int) string { return fmt.Sprintf("%s-%d", IndexName, i) }

// Encode returns the gzip'd JSON of s and the lowercase hex SHA-256 of those bytes. The JSON streams into the
// compressor, so a large workspace is never held uncompressed.
func Encode(s *Snapshot) (payload []byte, checksum string, err error) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err := json.MarshalWrite(zw, s, encodeOptions); err != nil {
		return nil, "", fmt.Errorf("failed to encode snapshot of %s: %w", s.Namespace, err)
	}
	if err := zw.Close(); err != nil {
		return nil, "", fmt.Errorf("failed to compress snapshot of %s: %w", s.Namespace, err)
	}
	return buf.Bytes(), Checksum(buf.Bytes()), nil
}

// Checksum is the lowercase hex SHA-256 of payload.
func Checksum(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

// Split cuts payload into chunks of at most max bytes. A payload that fits returns nil: it goes inline.
func Split(payload []byte, max int) [][]byte {
	if len(payload) <= max {
		return nil
	}
	var chunks [][]byte
	for len(payload) > 0 {
		n := min(max, len(payload))
		chunks = append(chunks, payload[:n])
		payload = payload[n:]
	}
	return chunks
}

// The codec is github.com/go-json-experiment/json, the implementation behind Go's encoding/json/v2: it decodes a
// workspace of ten thousand groups several times faster than encoding/json, and that decode is on the path of
// every change a gatewayd replica picks up. Nil slices stay null, as encoding/json writes them, so a snapshot
// reads the same whichever of the two wrote it.
var (
	encodeOptions = json.JoinOptions(json.FormatNilSliceAsNull(true), json.FormatNilMapAsNull(true))
	// Unknown fields are refused, so a snapshot from a newer manager is not half-understood.
	decodeOptions = json.RejectUnknownMembers(true)
)

// ErrChecksum means the payload does not match its index: corrupt, truncated or mixed from two versions.
var ErrChecksum = errors.New("snapshot checksum mismatch")

// maxDecodedBytes bounds decompression, so a hostile payload cannot exhaust memory.
const maxDecodedBytes = 1 << 30

// Decode verifies payload against checksum, decompresses and parses it. Unknown fields are refused, so a
// snapshot from a newer manager is not half-understood. The JSON is parsed as it is decompressed, so the
// uncompressed document (several times the payload) is never held whole.
func Decode(payload []byte, checksum string) (*Snapshot, error) {
	r, err := open(payload, checksum)
	if err != nil {
		return nil, err
	}
	var s Snapshot
	// UnmarshalRead reads to the end, so gzip checks its trailer (length and CRC) too.
	if err := json.UnmarshalRead(r, &s, decodeOptions); err != nil {
		return nil, fmt.Errorf("failed to parse snapshot: %w", err)
	}
	s.intern()
	return &s, nil
}

// open verifies payload against checksum and returns its decompressed bytes, as a reader limited to
// maxDecodedBytes.
func open(payload []byte, checksum string) (io.Reader, error) {
	if got := Checksum(payload); got != checksum {
		return nil, fmt.Errorf("%w: index says %s, payload hashes to %s", ErrChecksum, checksum, got)
	}
	// github.com/klauspost/compress inflates the same gzip as compress/gzip a quarter faster: a start
	// decompresses every part.
	zr, err := kgzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("failed to decompress snapshot: %w", err)
	}
	return io.LimitReader(zr, maxDecodedBytes), nil
}

// intern makes the equal strings of s's groups share one copy: modes, slugs, limit types and units, and the group
// IDs that parents and limit sources repeat. The decoder shares a string only while it stays in its cache of the
// 256 most recent ones, which a part of a thousand groups overruns; a hundred thousand groups repeat their
// ancestors' IDs several times each.
func (s *Snapshot) intern() {
	if len(s.Groups) == 0 {
		return
	}
	seen := make(map[string]string, len(s.Groups)+16)
	in := func(p *string) {
		if v, ok := seen[*p]; ok {
			*p = v
		} else {
			seen[*p] = *p
		}
	}
	limits := func(ls []Limit) {
		for i := range ls {
			in(&ls[i].Type)
			in(&ls[i].Unit)
			in(&ls[i].SourceGroup)
		}
	}
	for i := range s.Groups {
		g := &s.Groups[i]
		in(&g.ID)
		in(&g.ParentID)
		in(&g.Mode)
		for j := range g.Models {
			m := &g.Models[j]
			in(&m.Slug)
			limits(m.RateLimits)
			limits(m.UsageLimits)
		}
	}
}
