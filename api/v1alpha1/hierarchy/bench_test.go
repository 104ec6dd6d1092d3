package hierarchy

import (
	"fmt"
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// benchTree is a CASCADING chain of depth 5 whose every level declares REQUEST and TOKEN rate limits and both
// usage limits on two slugs, tightening downwards, inside a workspace of 1,000 other roots.
func benchTree() (*Index, *Index, string) {
	var groups []*gatewayv1.Group
	parent := ""
	for i := 1; i <= 5; i++ {
		t := int64(1000 - i)
		limits := []gatewayv1.Limit{lim(req, minute, t), lim(tok, sec, t), lim(req, day, t), lim(tok, day, t)}
		name := fmt.Sprintf("g%d", i)
		groups = append(groups, grp(name, parent, cascade, mdl("a", limits...), mdl("b", limits...)))
		parent = name
	}
	for i := range 1000 {
		groups = append(groups, grp(fmt.Sprintf("other-%d", i), "", cascade, mdl("a", lim(req, minute, 10))))
	}
	ix := NewIndex(groups)
	leaf, _ := ix.Get("g5")
	return ix, ix.With(leaf), "g5"
}

// BenchmarkResolveDepth5 is what the reconciler and the REST API pay per group: its chain and effective models.
func BenchmarkResolveDepth5(b *testing.B) {
	ix, _, leaf := benchTree()
	g, _ := ix.Get(leaf)
	b.ReportAllocs()
	for b.Loop() {
		chain, _ := ix.Chain(g)
		_ = Resolve(chain)
	}
}

// BenchmarkValidateDepth5 is what admission pays for a write to the deepest group (index already built).
func BenchmarkValidateDepth5(b *testing.B) {
	_, ix, leaf := benchTree()
	g, _ := ix.Get(leaf)
	b.ReportAllocs()
	for b.Loop() {
		if errs := Validate(g, ix); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}
