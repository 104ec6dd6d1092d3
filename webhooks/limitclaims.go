package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
)

// The claim on (parent, limit) closes the race of two cascading writes (docs/decisions.md): a parent lowered
// while a child is raised, each admitted against the other as stored, both stored. Every admission of a group
// in a CASCADING tree that declares limits joins the limit claims of the group itself and of each of its
// ancestors: one ConfigMap per group (`modelgate-claim-*`, label value claimLimits) whose entries, one per
// writer, hold the limits that writer was admitted with and when. A writer reads the claims, checks its limits
// against the entries younger than claimGrace (an ancestor's own entry as an ancestor, any other entry of its
// own claim as a descendant) as it checked them against the stored groups, and then writes its entry into every
// claim, each update conditioned on the resourceVersion it read. Two racing writes of one tree share a claim (the
// upper group's), so one of them updates it first and the other's update conflicts; that one reads again, sees
// the first's entry and is refused as if the first were stored. Entries older than claimGrace are dropped at the
// next write: by then their object is stored, or never will be. A group's claim is deleted with the group.

// claimLimits is the kind of a group's limit claim; its value is the group's name.
const claimLimits = "limits"

// entryKey is the data key of the entry of the group writer in a limit claim.
func entryKey(writer string) string { return "group." + writer }

// limitClaimAttempts bounds the rounds of one admission: each round at least one of the writers sharing a claim
// gets through, so this many writers of one tree can be admitted at once before one answers a conflict. Between
// rounds a writer that lost waits a random pause that grows with the round (claimBackoff), so a burst of siblings
// (a bulk import through REST) spreads out instead of colliding again at once; the rounds and their pauses stay
// well inside the webhook's 10 s timeout.
const limitClaimAttempts = 128

// claimBackoff is the pause before round n+1: random, up to 2^min(n,5) ms.
func claimBackoff(n int) time.Duration {
	return time.Duration(rand.Int64N(int64(time.Millisecond) << min(n, 5)))
}

// limitEntry is one writer's entry in a limit claim.
type limitEntry struct {
	// At is when the entry was written, in Unix nanoseconds.
	At     int64          `json:"at"`
	Limits []claimedLimit `json:"limits"`
}

type claimedLimit struct {
	Slug      string `json:"slug"`
	Type      string `json:"type"`
	Unit      string `json:"unit"`
	Threshold int64  `json:"threshold"`
}

// group is the entry as a group named name, whose limits the cascading rule compares.
func (e limitEntry) group(name string) *gatewayv1.Group {
	g := &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, l := range e.Limits {
		i := slices.IndexFunc(g.Spec.Models, func(m gatewayv1.ModelConfig) bool { return m.Slug == l.Slug })
		if i < 0 {
			g.Spec.Models = append(g.Spec.Models, gatewayv1.ModelConfig{Slug: l.Slug})
			i = len(g.Spec.Models) - 1
		}
		g.Spec.Models[i].RateLimits = append(g.Spec.Models[i].RateLimits, gatewayv1.Limit{
			Type: gatewayv1.LimitType(l.Type), Unit: gatewayv1.LimitUnit(l.Unit), Threshold: l.Threshold})
	}
	return g
}

// entryOf is g's entry at now: every limit it declares, sorted.
func entryOf(g *gatewayv1.Group, now time.Time) limitEntry {
	e := limitEntry{At: now.UnixNano()}
	for k, t := range declaredLimits(g) {
		e.Limits = append(e.Limits, claimedLimit{Slug: k.slug, Type: k.typ, Unit: k.unit, Threshold: t})
	}
	slices.SortFunc(e.Limits, func(a, b claimedLimit) int {
		if c := strings.Compare(a.Slug, b.Slug); c != 0 {
			return c
		}
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return strings.Compare(a.Unit, b.Unit)
	})
	return e
}

// chainNames lists the names of g's ancestors, nearest first, from the groups read for its admission, down to
// the first that is not stored (a parent GitOps has not applied yet still gets g's entry).
func chainNames(g *gatewayv1.Group, related []*gatewayv1.Group) []string {
	var out []string
	for id := g.ParentID(); id != "" && len(out) < gatewayv1.MaxDepth && !slices.Contains(out, id) && id != g.Name; {
		out = append(out, id)
		i := slices.IndexFunc(related, func(o *gatewayv1.Group) bool { return o.Name == id })
		if i < 0 {
			break
		}
		id = related[i].ParentID()
	}
	return out
}

// claimLimitsOf runs the cascading rule of g against the entries of the limit claims of g and of its ancestors
// (names, nearest first) and, when it passes, writes g's entry into each of them. It returns the rule's
// refusals; an error when the claims could not be read or written, or kept changing.
func (cl *claimer) claimLimitsOf(ctx context.Context, g *gatewayv1.Group, ancestors []string) (field.ErrorList, error) {
	now := cl.clock
	names := append([]string{g.Name}, ancestors...)
	for round := range limitClaimAttempts {
		if round > 0 {
			time.Sleep(claimBackoff(round))
		}
		t := now()
		entry, err := json.Marshal(entryOf(g, t))
		if err != nil {
			return nil, err
		}
		claims := make([]*corev1.ConfigMap, len(names))
		var above, below []*gatewayv1.Group
		for i, name := range names {
			cm := &corev1.ConfigMap{}
			err := cl.Reader.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: gatewayv1.ClaimName(claimLimits, name)}, cm)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("failed to read the limit claim of group %s: %w", name, err)
			}
			claims[i] = cm
			for key, raw := range cm.Data {
				writer, ok := strings.CutPrefix(key, entryKey(""))
				var e limitEntry
				if !ok || writer == g.Name || json.Unmarshal([]byte(raw), &e) != nil || t.Sub(time.Unix(0, e.At)) > claimGrace {
					continue
				}
				switch {
				case i == 0:
					below = append(below, e.group(writer)) // a descendant of g, admitted and maybe not stored yet
				case writer == name:
					above = append(above, e.group(writer)) // an ancestor, as it was admitted
				}
			}
		}
		slices.SortFunc(below, func(a, b *gatewayv1.Group) int { return strings.Compare(a.Name, b.Name) })
		if errs := hierarchy.CascadingConflicts(g, above, below); len(errs) > 0 {
			return errs, nil
		}
		if isDryRun(ctx) {
			return nil, nil
		}
		done, err := cl.writeEntries(ctx, g, names, claims, string(entry), t)
		if err != nil || done {
			return nil, err
		}
	}
	return nil, fmt.Errorf("the limit claims of group %s kept changing; retry", g.Name)
}

// writeEntries writes entry as g's into the claims of names (claims[i] as read, nil when absent), dropping the
// entries older than claimGrace. It returns false when another writer changed a claim since it was read.
func (cl *claimer) writeEntries(ctx context.Context, g *gatewayv1.Group, names []string, claims []*corev1.ConfigMap, entry string, now time.Time) (bool, error) {
	for i, name := range names {
		cm := claims[i]
		if cm == nil {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: gatewayv1.ClaimName(claimLimits, name),
				Labels: map[string]string{gatewayv1.LabelClaim: claimLimits}}, Data: map[string]string{claimValue: name, entryKey(g.Name): entry}}
			err := cl.Writer.Create(ctx, cm)
			if apierrors.IsAlreadyExists(err) {
				return false, nil
			}
			if err != nil {
				return false, fmt.Errorf("failed to write the limit claim of group %s: %w", name, err)
			}
			continue
		}
		for key, raw := range cm.Data {
			var e limitEntry
			if strings.HasPrefix(key, entryKey("")) && (json.Unmarshal([]byte(raw), &e) != nil || now.Sub(time.Unix(0, e.At)) > claimGrace) {
				delete(cm.Data, key)
			}
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[entryKey(g.Name)] = entry
		err := cl.Writer.Update(ctx, cm)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("failed to write the limit claim of group %s: %w", name, err)
		}
	}
	return true, nil
}

// dropLimitClaim deletes the limit claim of group name, which is going away for good. On a dry run nothing is
// written.
func (cl *claimer) dropLimitClaim(ctx context.Context, ns, name string) error {
	if isDryRun(ctx) {
		return nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.ClaimName(claimLimits, name)}}
	if err := cl.Writer.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete the limit claim of group %s: %w", name, err)
	}
	return nil
}
