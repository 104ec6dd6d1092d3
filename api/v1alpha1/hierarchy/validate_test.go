package hierarchy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// wantErr is one expected refusal: its field path, its kind and a piece of its message.
type wantErr struct {
	path   string
	typ    field.ErrorType
	detail string
}

// TestValidate runs Validate(write, NewIndex(existing).With(write)), as admission does, one case per rule.
func TestValidate(t *testing.T) {
	thresholdPath := "spec.models[1].rateLimits[1].threshold"
	tests := []struct {
		name     string
		existing []*gatewayv1.Group
		write    *gatewayv1.Group
		want     []wantErr
	}{
		{
			name:     "depth 5 allowed",
			existing: chainOf(4, indep),
			write:    grp("g5", "g4", indep, mdl("m")),
		},
		{
			name:     "depth 6 refused",
			existing: chainOf(5, indep),
			write:    grp("g6", "g5", indep, mdl("m")),
			want:     []wantErr{{"spec.hierarchy.parentGroupID", field.ErrorTypeInvalid, "hierarchy would be 6 levels deep"}},
		},
		{
			name: "late parent whose existing subtree makes the tree 6 deep refused",
			existing: []*gatewayv1.Group{
				grp("root", "", indep),
				grp("c1", "late", indep), grp("c2", "c1", indep), grp("c3", "c2", indep), grp("c4", "c3", indep),
			},
			write: grp("late", "root", indep, mdl("m")),
			want:  []wantErr{{"spec.hierarchy.parentGroupID", field.ErrorTypeInvalid, "hierarchy would be 6 levels deep (1 above, 4 below late)"}},
		},
		{
			name: "late root over an existing 4-level subtree allowed",
			existing: []*gatewayv1.Group{
				grp("c1", "late", indep), grp("c2", "c1", indep), grp("c3", "c2", indep), grp("c4", "c3", indep),
			},
			write: grp("late", "", indep, mdl("m")),
		},
		{
			name:  "self as parent refused",
			write: grp("a", "a", indep, mdl("m")),
			want:  []wantErr{{"spec.hierarchy.parentGroupID", field.ErrorTypeInvalid, "may not contain a cycle"}},
		},
		{
			name:     "cycle through an earlier child waiting for its parent refused",
			existing: []*gatewayv1.Group{grp("a", "b", indep)},
			write:    grp("b", "a", indep, mdl("m")),
			want:     []wantErr{{"spec.hierarchy.parentGroupID", field.ErrorTypeInvalid, "parent chain b <- a returns to b"}},
		},
		{
			name:     "child INDEPENDENT under CASCADING root refused",
			existing: []*gatewayv1.Group{grp("root", "", cascade), grp("mid", "root", cascade)},
			write:    grp("child", "mid", indep, mdl("m")),
			want:     []wantErr{{"spec.hierarchy.limitEnforcement", field.ErrorTypeInvalid, "must equal the limitEnforcement of the tree's root root (CASCADING)"}},
		},
		{
			name:     "child CASCADING under INDEPENDENT root refused",
			existing: []*gatewayv1.Group{grp("root", "", indep)},
			write:    grp("child", "root", cascade, mdl("m")),
			want:     []wantErr{{"spec.hierarchy.limitEnforcement", field.ErrorTypeInvalid, "must equal the limitEnforcement of the tree's root root (INDEPENDENT)"}},
		},
		{
			name:     "late root whose waiting children use the other mode refused",
			existing: []*gatewayv1.Group{grp("c1", "late", cascade)},
			write:    grp("late", "", indep, mdl("m")),
			want:     []wantErr{{"spec.hierarchy.limitEnforcement", field.ErrorTypeInvalid, "descendant c1 uses CASCADING"}},
		},
		{
			name:     "child with the root's mode allowed",
			existing: []*gatewayv1.Group{grp("root", "", cascade)},
			write:    grp("child", "root", cascade, mdl("m")),
		},
		{
			name:     "cascading child above its parent refused at the limit's threshold",
			existing: []*gatewayv1.Group{grp("root", "", cascade, mdl("m", lim(req, minute, 100)))},
			write:    grp("child", "root", cascade, mdl("other"), mdl("m", lim(tok, minute, 5), lim(req, minute, 101))),
			want:     []wantErr{{thresholdPath, field.ErrorTypeForbidden, MsgChildExceedsParent}},
		},
		{
			name: "cascading child above a grandparent refused when the parent declares nothing",
			existing: []*gatewayv1.Group{
				grp("root", "", cascade, mdl("m", lim(req, minute, 100))),
				grp("mid", "root", cascade, mdl("m")),
			},
			write: grp("leaf", "mid", cascade, mdl("other"), mdl("m", lim(tok, minute, 5), lim(req, minute, 200))),
			want:  []wantErr{{thresholdPath, field.ErrorTypeForbidden, "ancestor root allows 100"}},
		},
		{
			name:     "cascading usage limit above the parent's refused",
			existing: []*gatewayv1.Group{grp("root", "", cascade, mdl("m", lim(tok, day, 1000)))},
			write:    grp("child", "root", cascade, mdl("m", lim(tok, day, 1001))),
			want:     []wantErr{{"spec.models[0].usageLimits[0].threshold", field.ErrorTypeForbidden, MsgChildExceedsParent}},
		},
		{
			name: "cascading ancestor lowered below a descendant refused",
			existing: []*gatewayv1.Group{
				grp("root", "", cascade, mdl("m", lim(req, minute, 100))),
				grp("mid", "root", cascade, mdl("m")),
				grp("leaf", "mid", cascade, mdl("m", lim(req, minute, 60))),
			},
			write: grp("root", "", cascade, mdl("m", lim(req, minute, 50))),
			want:  []wantErr{{"spec.models[0].rateLimits[0].threshold", field.ErrorTypeForbidden, "descendant leaf declares 60; lower the descendant first"}},
		},
		{
			name:     "cascading threshold equal to the parent's allowed",
			existing: []*gatewayv1.Group{grp("root", "", cascade, mdl("m", lim(req, minute, 100)))},
			write:    grp("child", "root", cascade, mdl("m", lim(req, minute, 100))),
		},
		{
			name: "cascading ancestor lowered to equal a descendant allowed",
			existing: []*gatewayv1.Group{
				grp("root", "", cascade, mdl("m", lim(req, minute, 100))),
				grp("child", "root", cascade, mdl("m", lim(req, minute, 60))),
			},
			write: grp("root", "", cascade, mdl("m", lim(req, minute, 60))),
		},
		{
			name: "cascading over-provisioning across siblings allowed",
			existing: []*gatewayv1.Group{
				grp("root", "", cascade, mdl("m", lim(req, minute, 100))),
				grp("s1", "root", cascade, mdl("m", lim(req, minute, 90))),
			},
			write: grp("s2", "root", cascade, mdl("m", lim(req, minute, 90))),
		},
		{
			name:     "cascading limits of another unit or slug do not conflict",
			existing: []*gatewayv1.Group{grp("root", "", cascade, mdl("m", lim(req, sec, 1)), mdl("n", lim(req, minute, 1)))},
			write:    grp("child", "root", cascade, mdl("m", lim(req, minute, 500)), mdl("n")),
		},
		{
			name:     "independent child above its parent allowed",
			existing: []*gatewayv1.Group{grp("root", "", indep, mdl("m", lim(req, minute, 100)))},
			write:    grp("child", "root", indep, mdl("m", lim(req, minute, 1000))),
		},
		{
			name:  "missing parent admitted",
			write: grp("child", "ghost", cascade, mdl("m", lim(req, minute, 1000))),
		},
		{
			name:     "missing grandparent admitted, parent still checked",
			existing: []*gatewayv1.Group{grp("mid", "ghost", cascade, mdl("m", lim(req, minute, 10)))},
			write:    grp("leaf", "mid", cascade, mdl("m", lim(req, minute, 11))),
			want:     []wantErr{{"spec.models[0].rateLimits[0].threshold", field.ErrorTypeForbidden, "ancestor mid allows 10"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := Validate(tc.write, NewIndex(tc.existing).With(tc.write))
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors, want %d: %v", len(errs), len(tc.want), errs)
			}
			for i, w := range tc.want {
				e := errs[i]
				if e.Field != w.path || e.Type != w.typ || !strings.Contains(e.Detail, w.detail) {
					t.Errorf("error %d = {%s %s %q}, want {%s %s containing %q}", i, e.Field, e.Type, e.Detail, w.path, w.typ, w.detail)
				}
			}
		})
	}
}

// TestValidateCascadingMessage pins the exact sentence of docs/rest-api.md "Errors": the refusal begins with it.
func TestValidateCascadingMessage(t *testing.T) {
	root := grp("root", "", cascade, mdl("m", lim(req, minute, 100)))
	child := grp("child", "root", cascade, mdl("m", lim(req, minute, 101)))
	errs := Validate(child, NewIndex([]*gatewayv1.Group{root}).With(child))
	if len(errs) != 1 {
		t.Fatalf("want one error, got %v", errs)
	}
	if !strings.HasPrefix(errs[0].Detail, "Child group exceeds parent group limit.") {
		t.Errorf("detail %q does not begin with the exact spec message", errs[0].Detail)
	}
	if got := errs.ToAggregate().Error(); !strings.Contains(got, "spec.models[0].rateLimits[0].threshold: Forbidden: Child group exceeds parent group limit.") {
		t.Errorf("aggregate %q does not name the field, the kind and the message", got)
	}
}
