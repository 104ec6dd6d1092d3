package hierarchy

import (
	"fmt"
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// forest decodes fuzz bytes into up to 8 groups. Each group takes three bytes: its parent (another group, itself,
// a missing id or none), its mode, and a limit on one of two slugs. Any forest can come out, including cycles,
// mixed modes and trees deeper than MaxDepth, which is the point: the webhook and the reconciler see whatever
// is stored, not only what admission would have let in.
func forest(data []byte) []*gatewayv1.Group {
	n := min(len(data)/3, 8)
	groups := make([]*gatewayv1.Group, 0, n)
	for i := range n {
		b := data[i*3 : i*3+3]
		parent := ""
		switch p := int(b[0]) % (n + 2); {
		case p < n:
			parent = fmt.Sprintf("g%d", p) // may be the group itself
		case p == n:
			parent = "ghost"
		}
		mode := indep
		if b[1]&1 == 1 {
			mode = cascade
		}
		units := []gatewayv1.LimitUnit{sec, minute, day}
		l := lim([]gatewayv1.LimitType{tok, req}[b[1]>>1&1], units[int(b[1]>>2)%3], int64(b[2])+1)
		models := []gatewayv1.ModelConfig{mdl([]string{"a", "b"}[b[1]>>4&1], l)}
		if b[1]&0x20 != 0 {
			models = append(models, mdl("c"))
		}
		groups = append(groups, grp(fmt.Sprintf("g%d", i), parent, mode, models...))
	}
	return groups
}

// FuzzValidate builds random small forests and checks that Validate and Resolve never panic, that a cycle is
// always refused, and that Resolve keeps exactly the group's own slugs.
func FuzzValidate(f *testing.F) {
	f.Add([]byte{9, 1, 5, 0, 1, 7, 1, 1, 9})                                              // root, child, grandchild, cascading
	f.Add([]byte{0, 0, 1})                                                                // self parent
	f.Add([]byte{1, 0, 0, 0, 0, 0})                                                       // two-group cycle
	f.Add([]byte{8, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0, 5, 0, 0, 6, 0, 0}) // deep chain
	f.Fuzz(func(t *testing.T, data []byte) {
		groups := forest(data)
		ix := NewIndex(groups)
		for _, g := range groups {
			errs := Validate(g, ix.With(g))
			chain, status := ix.Chain(g)
			if status.Cycle && len(errs) == 0 {
				t.Fatalf("cycle %s admitted", chain)
			}
			effective := Resolve(chain)
			if len(effective) != len(g.Spec.Models) {
				t.Fatalf("Resolve(%s) has %d slugs, the group has %d", chain, len(effective), len(g.Spec.Models))
			}
			for _, em := range effective {
				if modelOf(g, em.Slug) == nil {
					t.Fatalf("Resolve(%s) invented slug %q", chain, em.Slug)
				}
			}
			_ = ix.Descendants(g.Name)
			_ = ix.Height(g.Name)
		}
	})
}
