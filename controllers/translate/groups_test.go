package translate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// g builds a group created at minute created, with an optional TOKEN/MINUTE limit on demo/echo.
func g(name, parent string, mode gatewayv1.LimitEnforcement, created int, tokens int64) *gatewayv1.Group {
	out := &gatewayv1.Group{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, created, 0, 0, time.UTC))},
		Spec: gatewayv1.GroupSpec{ExternalEntityID: "ext-" + name, Hierarchy: gatewayv1.Hierarchy{LimitEnforcement: mode},
			Models: []gatewayv1.ModelConfig{{Slug: "demo/echo"}}},
	}
	if parent != "" {
		out.Spec.Hierarchy.ParentGroupID = ptr.To(parent)
	}
	if tokens > 0 {
		out.Spec.Models[0].RateLimits = []gatewayv1.Limit{{Type: gatewayv1.LimitTypeToken, Unit: gatewayv1.UnitMinute, Threshold: tokens}}
	}
	return out
}

func TestJudge(t *testing.T) {
	ind, cas := gatewayv1.EnforcementIndependent, gatewayv1.EnforcementCascading
	deleting := func(gr *gatewayv1.Group) *gatewayv1.Group {
		gr.DeletionTimestamp = ptr.To(metav1.Now())
		return gr
	}
	external := func(gr *gatewayv1.Group, id string) *gatewayv1.Group {
		gr.Spec.ExternalEntityID = id
		return gr
	}
	chain := func(n int) []*gatewayv1.Group {
		out := []*gatewayv1.Group{g("l1", "", ind, 0, 0)}
		for i := 2; i <= n; i++ {
			out = append(out, g(fmt.Sprintf("l%d", i), fmt.Sprintf("l%d", i-1), ind, i, 0))
		}
		return out
	}
	cases := []struct {
		name   string
		groups []*gatewayv1.Group
		// want maps a group to "Reason" or "Reason: substring of the message".
		want map[string]string
		// conflicts maps a group to a substring of its Verdict.Conflict; the others have none.
		conflicts map[string]string
	}{{
		name:   "three-level tree is ready",
		groups: chain(3),
		want:   map[string]string{"l1": "Ready", "l2": "Ready", "l3": "Ready: depth 3 under root l1"},
	}, {
		name:   "being deleted takes the subtree with it",
		groups: []*gatewayv1.Group{g("root", "", ind, 0, 0), deleting(g("mid", "root", ind, 1, 0)), g("leaf", "mid", ind, 2, 0)},
		want:   map[string]string{"root": "Ready", "mid": "Deleting: Group mid", "leaf": "Deleting: Ancestor group mid"},
	}, {
		name:   "missing ancestor anywhere up the chain",
		groups: []*gatewayv1.Group{g("mid", "ghost", ind, 1, 0), g("leaf", "mid", ind, 2, 0)},
		want:   map[string]string{"mid": "ParentNotFound: Parent group ghost", "leaf": "ParentNotFound: Parent group ghost"},
	}, {
		name:   "cycle",
		groups: []*gatewayv1.Group{g("a", "b", ind, 0, 0), g("b", "a", ind, 1, 0)},
		want:   map[string]string{"a": "Invalid: cycle", "b": "Invalid: cycle"},
	}, {
		name:   "too deep blames only the groups below level five",
		groups: chain(7),
		want: map[string]string{"l1": "Ready", "l5": "Ready", "l6": "Invalid: 6 levels deep",
			"l7": "Invalid: levels deep"},
	}, {
		name:   "mode differs from the root",
		groups: []*gatewayv1.Group{g("root", "", cas, 0, 0), g("child", "root", ind, 1, 0)},
		want:   map[string]string{"root": "Ready", "child": "Invalid: spec.hierarchy.limitEnforcement"},
	}, {
		// Admission refuses it, but two racing writes can store it: the child stays served (every call charges the
		// parent too, so the parent's limit binds) and reports the conflict.
		name: "cascading child above its parent is served with a conflict, and so is its subtree",
		groups: []*gatewayv1.Group{g("root", "", cas, 0, 100), g("greedy", "root", cas, 1, 200), g("fine", "root", cas, 2, 50),
			g("under-greedy", "greedy", cas, 3, 10)},
		want:      map[string]string{"root": "Ready", "fine": "Ready", "greedy": "Ready", "under-greedy": "Ready"},
		conflicts: map[string]string{"greedy": "Child group exceeds parent group limit."},
	}, {
		name:   "independent child may exceed its parent",
		groups: []*gatewayv1.Group{g("root", "", ind, 0, 100), g("big", "root", ind, 1, 200)},
		want:   map[string]string{"root": "Ready", "big": "Ready"},
	}, {
		name: "duplicate external id: the older keeps it, a deleted holder frees it",
		groups: []*gatewayv1.Group{external(g("new", "", ind, 5, 0), "x"), external(g("old", "", ind, 1, 0), "x"),
			g("under-new", "new", ind, 6, 0), external(deleting(g("gone", "", ind, 0, 0)), "x")},
		want: map[string]string{"old": "Ready", "new": "DuplicateExternalEntityID: held by the older group old",
			"under-new": "Invalid: Ancestor group new", "gone": "Deleting"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gs := NewGroups(tc.groups)
			byName := map[string]*gatewayv1.Group{}
			for _, gr := range tc.groups {
				byName[gr.Name] = gr
			}
			for name, want := range tc.want {
				v := gs.Judge(byName[name])
				reason, substr, _ := strings.Cut(want, ": ")
				if v.Reason != reason || !strings.Contains(v.Message, substr) {
					t.Errorf("%s: got %s (%q), want %s containing %q", name, v.Reason, v.Message, reason, substr)
				}
				if v.Ready != (reason == gatewayv1.ReasonReady) {
					t.Errorf("%s: Ready = %v with reason %s", name, v.Ready, v.Reason)
				}
				if v.Ready && (!v.Resolved || v.Chain.Root().ParentID() != "") {
					t.Errorf("%s: ready but chain %s is not resolved to a root", name, v.Chain)
				}
				if want := tc.conflicts[name]; (want == "") != (v.Conflict == "") || !strings.Contains(v.Conflict, want) {
					t.Errorf("%s: conflict %q, want one containing %q", name, v.Conflict, want)
				}
			}
		})
	}
}

func TestKeyCredentials(t *testing.T) {
	for _, tc := range []struct {
		name         string
		src          gatewayv1.KeySource
		st           gatewayv1.KeyStatus
		prefix, hash string
		ok           bool
	}{
		{"spec wins over stale status", gatewayv1.KeySource{Prefix: "p", Hash: "h"}, gatewayv1.KeyStatus{Prefix: "x", Hash: "y"}, "p", "h", true},
		{"derived into status", gatewayv1.KeySource{SecretRef: &gatewayv1.SecretKeySelector{Name: "s"}}, gatewayv1.KeyStatus{Prefix: "p", Hash: "h"}, "p", "h", true},
		{"not derived yet", gatewayv1.KeySource{SecretRef: &gatewayv1.SecretKeySelector{Name: "s"}}, gatewayv1.KeyStatus{}, "", "", false},
		{"status still of a minted key", gatewayv1.KeySource{SecretRef: &gatewayv1.SecretKeySelector{Name: "s"}}, gatewayv1.KeyStatus{Prefix: "p", Hash: "h", SecretName: "k-key"}, "", "", false},
		{"minted", gatewayv1.KeySource{}, gatewayv1.KeyStatus{Prefix: "p", Hash: "h", SecretName: "k-key"}, "p", "h", true},
		{"hash without prefix", gatewayv1.KeySource{}, gatewayv1.KeyStatus{Hash: "h"}, "", "h", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, h, ok := KeyCredentials(tc.src, tc.st)
			if p != tc.prefix || h != tc.hash || ok != tc.ok {
				t.Errorf("KeyCredentials = (%q, %q, %v), want (%q, %q, %v)", p, h, ok, tc.prefix, tc.hash, tc.ok)
			}
		})
	}
}
