package reload

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/limits"
)

// bigSnapshot has enough groups for several content-addressed ranges.
func bigSnapshot(groups int, threshold int64) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Namespace: ns}
	for i := range groups {
		s.Groups = append(s.Groups, snapshot.Group{ID: fmt.Sprintf("g-%05d", i), Mode: "INDEPENDENT", Depth: 1,
			Models: []snapshot.Model{{Slug: "demo/echo", RateLimits: []snapshot.Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: threshold, SourceGroup: "g"}}}}})
	}
	return s
}

// publishParts writes the parts that are not there yet and the index, as the manager does, and returns the
// parts it wrote.
func (s *cmStore) publishParts(t *testing.T, version int64, snap *snapshot.Snapshot) (written []string) {
	t.Helper()
	parts, sum, err := snapshot.EncodeParts(snap, snapshot.MaxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if _, ok, _ := s.indexer.GetByKey(ns + "/" + snapshot.PartName(p.Hash)); ok {
			continue
		}
		s.put(snapshot.PartName(p.Hash), nil, p.Payload)
		written = append(written, p.Hash)
	}
	s.put(snapshot.IndexName, map[string]string{snapshot.DataVersion: strconv.FormatInt(version, 10), snapshot.DataChecksum: sum,
		snapshot.DataChunks: strconv.Itoa(len(parts)), snapshot.DataFormat: snapshot.FormatContent, snapshot.DataParts: snapshot.PartList(parts)}, nil)
	return written
}

// loadedParts is a loader serving snap, published as content-addressed parts at version 1.
func loadedParts(t *testing.T, snap *snapshot.Snapshot) (*Loader, *cmStore) {
	t.Helper()
	l, s := newLoader(t)
	s.publishParts(t, 1, snap)
	l.Sync(context.Background(), ns)
	if l.servedVersion(t) != 1 {
		t.Fatalf("v1 not loaded: errors %v", l.errorsOf())
	}
	return l, s
}

func TestLoadContentAddressedParts(t *testing.T) {
	ctx := context.Background()
	l, s := newLoader(t)
	s.publishParts(t, 1, bigSnapshot(5000, 600))
	l.Sync(ctx, ns)
	if l.servedVersion(t) != 1 || len(l.View().Namespace(ns).Groups) != 5000 {
		t.Fatalf("content-addressed v1 not loaded: version %d, errors %v", l.servedVersion(t), l.errorsOf())
	}

	// One group changes: one part is new, and only it is decoded; the others come from the last load.
	changed := bigSnapshot(5000, 600)
	changed.Groups[4321].Models[0].RateLimits[0].Threshold = 7
	if written := s.publishParts(t, 2, changed); len(written) != 1 {
		t.Fatalf("a one-group change wrote %d parts, want 1", len(written))
	}
	before := l.parts[ns]
	l.Sync(ctx, ns)
	if l.servedVersion(t) != 2 {
		t.Fatalf("v2 not loaded: errors %v", l.errorsOf())
	}
	if got := l.View().Namespace(ns).Snapshot.Groups[4321].Models[0].RateLimits[0].Threshold; got != 7 {
		t.Fatalf("changed group's threshold is %d, want 7", got)
	}
	reused := 0
	for h, p := range l.parts[ns] {
		if before[h] == p {
			reused++
		}
	}
	if reused != len(l.parts[ns])-1 {
		t.Errorf("%d of %d parts reused from the last load, want all but the changed one", reused, len(l.parts[ns]))
	}

	// Refused, keeping v2: a part whose bytes do not match its name, a missing part, a list that does not
	// match the checksum.
	next := bigSnapshot(5000, 600)
	next.Groups[4321].Models[0].RateLimits[0].Threshold = 7
	next.Groups[10].Models[0].RateLimits[0].Threshold = 9
	parts, sum, _ := snapshot.EncodeParts(next, snapshot.MaxChunkBytes)
	list := snapshot.PartList(parts)
	index := func(version int, list, sum string) {
		s.put(snapshot.IndexName, map[string]string{snapshot.DataVersion: strconv.Itoa(version), snapshot.DataChecksum: sum,
			snapshot.DataChunks: strconv.Itoa(len(parts)), snapshot.DataFormat: snapshot.FormatContent, snapshot.DataParts: list}, nil)
	}
	var fresh snapshot.Part
	for _, p := range parts {
		if _, ok := l.parts[ns][p.Hash]; !ok {
			fresh = p
		}
	}
	for _, tc := range []struct {
		name  string
		write func()
	}{
		{"missing part", func() { index(3, list, sum) }},
		{"corrupt part", func() { s.put(snapshot.PartName(fresh.Hash), nil, flipped(fresh.Payload)); index(3, list, sum) }},
		{"list does not match checksum", func() { index(3, list, snapshot.PartsChecksum("x")) }},
	} {
		before := l.errorsOf()
		tc.write()
		l.Sync(ctx, ns)
		if l.errorsOf() != before+1 || l.servedVersion(t) != 2 {
			t.Errorf("%s: errors %v→%v, serving %d; want one more error and the last good 2", tc.name, before, l.errorsOf(), l.servedVersion(t))
		}
	}
	s.put(snapshot.PartName(fresh.Hash), nil, fresh.Payload)
	index(3, list, sum)
	l.Sync(ctx, ns)
	if l.servedVersion(t) != 3 {
		_, err := l.load(ns, l.View().Namespace(ns))
		t.Fatalf("v3 not loaded once its part is right: errors %v: %v", l.errorsOf(), err)
	}
}

func flipped(b []byte) []byte {
	out := append([]byte(nil), b...)
	out[len(out)/2] ^= 0xff
	return out
}

// TestLoadReusesKeyParts: a change to one group reads none of the parts of keys, which live on as the view's
// blocks only (their ConfigMaps are corrupted after the first load, so reading one would refuse the load); a
// revoked key rewrites one part of keys, and only it is read.
func TestLoadReusesKeyParts(t *testing.T) {
	ctx := context.Background()
	snap := scaleWorkspace(1000, 20000)
	l, s := loadedParts(t, snap)
	first, _, _ := snapshot.EncodeParts(snap, snapshot.MaxChunkBytes)
	keyParts := 0
	for _, p := range first {
		if l.View().Namespace(ns).HasKeyPart(p.Hash) {
			s.put(snapshot.PartName(p.Hash), nil, flipped(p.Payload))
			keyParts++
		}
	}
	if keyParts < 2 {
		t.Fatalf("test setup: %d parts of keys, want several", keyParts)
	}
	for _, p := range l.parts[ns] {
		if len(p.APIKeys) > 0 {
			t.Fatal("the loader keeps decoded keys besides the view's")
		}
	}

	snap.Groups[10].Models[0].RateLimits[0].Threshold = 7
	s.publishParts(t, 2, snap)
	l.Sync(ctx, ns)
	if l.servedVersion(t) != 2 || l.errorsOf() != 0 {
		t.Fatalf("the one-group change was not loaded from the kept parts: version %d, errors %v", l.servedVersion(t), l.errorsOf())
	}
	if got := l.View().Namespace(ns).Groups[snap.Groups[10].ID].Models["bench/plain"].Plan.Limits; !slices.ContainsFunc(got, func(x limits.Limit) bool { return x.Threshold == 7 }) {
		t.Errorf("the changed group's plan is %v, want its new threshold 7", got)
	}

	revoked := snap.APIKeys[5000]
	snap.APIKeys = slices.Delete(snap.APIKeys, 5000, 5001)
	if written := s.publishParts(t, 3, snap); len(written) != 1 {
		t.Fatalf("a revoked key rewrote %d parts, want 1", len(written))
	}
	l.Sync(ctx, ns)
	if l.servedVersion(t) != 3 {
		t.Fatalf("v3 not loaded: errors %v", l.errorsOf())
	}
	if l.View().HasKey(ns, revoked.Prefix) || !l.View().HasKey(ns, snap.APIKeys[5000].Prefix) {
		t.Error("after the revocation the view serves the revoked key, or lost its neighbour")
	}
}

// TestLoadRefusesBadKeyParts: a part of keys whose bytes match its name but are not a good part (truncated JSON,
// a garbled key, a key whose hash is not hex) is refused with an error naming it, and the last good snapshot
// keeps serving every key.
func TestLoadRefusesBadKeyParts(t *testing.T) {
	ctx := context.Background()
	snap := scaleWorkspace(100, 20000)
	l, s := loadedParts(t, snap)
	parts, _, err := snapshot.EncodeParts(snap, snapshot.MaxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	last := len(parts) - 1
	doc := inflate(t, parts[last].Payload)
	for name, bad := range map[string][]byte{
		"truncated":        doc[:len(doc)/2],
		"a garbled key":    bytes.Replace(doc, []byte(`","hash":"`), []byte(`","hash":`), 1),
		"a hash not hex":   bytes.Replace(doc, []byte(`","hash":"`), []byte(`","hash":"zz`), 1),
		"a key of no part": bytes.Replace(doc, []byte(`"apiKeys":[`), []byte(`"apiKeys":[{}`), 1),
	} {
		payload := gzipOf(t, bad)
		p := snapshot.Part{Hash: snapshot.Checksum(payload), Payload: payload}
		s.put(snapshot.PartName(p.Hash), nil, p.Payload)
		list := snapshot.PartList(append(slices.Clone(parts[:last]), p))
		s.put(snapshot.IndexName, map[string]string{snapshot.DataVersion: "2", snapshot.DataChecksum: snapshot.PartsChecksum(list),
			snapshot.DataChunks: strconv.Itoa(len(parts)), snapshot.DataFormat: snapshot.FormatContent, snapshot.DataParts: list}, nil)
		before := l.errorsOf()
		l.Sync(ctx, ns)
		if l.errorsOf() != before+1 || l.servedVersion(t) != 1 {
			t.Errorf("%s: errors %v→%v, serving %d; want one more error and the last good 1", name, before, l.errorsOf(), l.servedVersion(t))
		}
		if _, err := l.load(ns, l.View().Namespace(ns)); err == nil || !strings.Contains(err.Error(), "part "+p.Hash) {
			t.Errorf("%s: %v, want an error naming part %s", name, err, p.Hash)
		}
		for _, k := range snap.APIKeys {
			if !l.View().HasKey(ns, k.Prefix) {
				t.Fatalf("%s: key %s is no longer served", name, k.ID)
			}
		}
	}
}

func inflate(t *testing.T, payload []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func gzipOf(t *testing.T, doc []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(doc); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
