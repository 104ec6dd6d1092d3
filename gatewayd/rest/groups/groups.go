package groups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
)

// api serves the routes of this package.
type api struct{ *kit.Kit }

// Register adds the routes of this package to mux.
func Register(mux ingress.Mux, k *kit.Kit) {
	a := &api{k}
	k.Handle(mux, "POST /v1/gateway/groups", kit.AccessGateway, a.createGroup)
	k.Handle(mux, "GET /v1/gateway/groups", kit.AccessGateway, a.listGroups)
	k.Handle(mux, "GET /v1/gateway/groups/{group_id}", kit.AccessGateway, a.getGroup)
	k.Handle(mux, "PATCH /v1/gateway/groups/{group_id}", kit.AccessGateway, a.patchGroup)
	k.Handle(mux, "DELETE /v1/gateway/groups/{group_id}", kit.AccessGateway, a.deleteGroup)
	k.Handle(mux, "GET /v1/gateway/groups/{group_id}/usage", kit.AccessGateway, a.groupUsage)
}

// JSON shapes of docs/rest-api.md "Groups".

type limitJSON struct {
	Type      string `json:"type"`
	Unit      string `json:"unit"`
	Threshold int64  `json:"threshold"`
}

type effectiveLimitJSON struct {
	limitJSON
	SourceGroup string `json:"source_group"`
}

type modelJSON struct {
	Slug        string      `json:"slug"`
	RateLimits  []limitJSON `json:"rate_limits"`
	UsageLimits []limitJSON `json:"usage_limits"`
}

type effectiveModelJSON struct {
	Slug        string               `json:"slug"`
	RateLimits  []effectiveLimitJSON `json:"rate_limits"`
	UsageLimits []effectiveLimitJSON `json:"usage_limits"`
}

type groupMetaJSON struct {
	Name             string `json:"name"`
	ExternalEntityID string `json:"external_entity_id"`
}

type hierarchyJSON struct {
	LimitEnforcement string  `json:"limit_enforcement"`
	ParentGroupID    *string `json:"parent_group_id"`
}

type groupJSON struct {
	ID              string               `json:"id"`
	Metadata        groupMetaJSON        `json:"metadata"`
	Models          []modelJSON          `json:"models"`
	EffectiveModels []effectiveModelJSON `json:"effective_models"`
	Hierarchy       hierarchyJSON        `json:"hierarchy"`
	CreatedAt       string               `json:"created_at"`
}

type createGroupRequest struct {
	Metadata *struct {
		Name             string `json:"name"`
		ExternalEntityID string `json:"external_entity_id"`
	} `json:"metadata"`
	Models    []modelJSON `json:"models"`
	Hierarchy *struct {
		LimitEnforcement string  `json:"limit_enforcement"`
		ParentGroupID    *string `json:"parent_group_id"`
	} `json:"hierarchy"`
}

type patchGroupRequest struct {
	Metadata *struct {
		Name *string `json:"name"`
	} `json:"metadata"`
	Models *[]modelJSON `json:"models"`
	// Hierarchy is accepted by the decoder only to refuse it with a clear message, null included: a raw
	// message holds "null" where any other type would be left as if the member were absent.
	Hierarchy json.RawMessage `json:"hierarchy"`
}

func (a *api) createGroup(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req createGroupRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.Metadata == nil || req.Metadata.ExternalEntityID == "" {
		kit.BadRequest(w, "metadata.external_entity_id", "metadata.external_entity_id is required.")
		return
	}
	if len(req.Models) == 0 {
		kit.BadRequest(w, "models", "models must be non-empty on create.")
		return
	}
	models, ok := modelsFromJSON(w, req.Models)
	if !ok {
		return
	}
	g := &gatewayv1.Group{
		ObjectMeta: metav1.ObjectMeta{Name: ids.New(ids.Group), Namespace: c.Namespace},
		Spec: gatewayv1.GroupSpec{
			DisplayName:      req.Metadata.Name,
			ExternalEntityID: req.Metadata.ExternalEntityID,
			Models:           models,
		},
	}
	if h := req.Hierarchy; h != nil {
		switch h.LimitEnforcement {
		case "", string(gatewayv1.EnforcementIndependent), string(gatewayv1.EnforcementCascading):
		default:
			kit.BadRequest(w, "hierarchy.limit_enforcement", "hierarchy.limit_enforcement must be INDEPENDENT or CASCADING.")
			return
		}
		g.Spec.Hierarchy.LimitEnforcement = gatewayv1.LimitEnforcement(h.LimitEnforcement)
		if h.ParentGroupID != nil && *h.ParentGroupID != "" {
			pid := *h.ParentGroupID
			if !kit.ValidName(pid) {
				kit.NotFound(w, "Parent group", pid)
				return
			}
			var parent gatewayv1.Group
			err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: pid}, &parent)
			if apierrors.IsNotFound(err) || (err == nil && parent.DeletionTimestamp != nil) {
				kit.NotFound(w, "Parent group", pid)
				return
			}
			if err != nil {
				kit.WriteKubeError(w, r, "get parent group", err)
				return
			}
			g.Spec.Hierarchy.ParentGroupID = &pid
			// A child that does not name a mode takes its parent's, the only one it may have.
			if h.LimitEnforcement == "" {
				g.Spec.Hierarchy.LimitEnforcement = parent.Enforcement()
			}
		}
	}
	if g.Spec.Hierarchy.LimitEnforcement == "" {
		g.Spec.Hierarchy.LimitEnforcement = gatewayv1.EnforcementIndependent
	}
	dry, ok := dryRun(w, r)
	if !ok {
		return
	}
	var opts []client.CreateOption
	if dry {
		opts = append(opts, client.DryRunAll)
	}
	if err := a.Opts.Client.Create(r.Context(), g, opts...); err != nil {
		if pid := g.ParentID(); pid != "" && parentDeleting(err) {
			// The parent's deletion began after it was read above: 404, as for a parent seen being deleted.
			kit.NotFound(w, "Parent group", pid)
			return
		}
		kit.WriteKubeError(w, r, "create group", err)
		return
	}
	if dry {
		a.writeGroup(w, r, c, http.StatusOK, g)
		return
	}
	a.awaitGroup(r.Context(), c.Namespace, g)
	a.writeGroup(w, r, c, http.StatusCreated, g)
}

func (a *api) getGroup(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	g, ok := a.LoadGroup(w, r, c)
	if !ok {
		return
	}
	a.writeGroup(w, r, c, http.StatusOK, g)
}

func (a *api) listGroups(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	page, ok := kit.ParsePage(w, r)
	if !ok {
		return
	}
	ext, ok := kit.Query(w, r, "external_entity_id")
	if !ok {
		return
	}
	if ext != "" {
		a.findGroupsByExternalID(w, r, c, ext)
		return
	}
	groups, err := a.liveGroups(r.Context(), c.Namespace)
	if err != nil {
		kit.WriteKubeError(w, r, "list groups", err)
		return
	}
	ix := hierarchy.NewIndex(groups)
	ids := make([]string, len(groups))
	for i, g := range groups {
		ids[i] = g.Name
	}
	sel, more := page.Slice(ids)
	items := make([]groupJSON, 0, len(sel))
	for _, i := range sel {
		items = append(items, toGroupJSON(groups[i], ix))
	}
	httperr.WriteJSON(w, http.StatusOK, kit.NewPage(items, more, ids, sel))
}

// findGroupsByExternalID answers the groups with an external id, read through the CRD's field selector rather
// than a list of the whole workspace.
func (a *api) findGroupsByExternalID(w http.ResponseWriter, r *http.Request, c auth.Caller, ext string) {
	var list gatewayv1.GroupList
	if err := a.Opts.Client.List(r.Context(), &list, client.InNamespace(c.Namespace), client.MatchingFields{gatewayv1.FieldGroupExternalID: ext}); err != nil {
		kit.WriteKubeError(w, r, "list groups", err)
		return
	}
	items := []groupJSON{}
	for i := range list.Items {
		g := &list.Items[i]
		if g.DeletionTimestamp != nil {
			continue
		}
		ancestors, err := a.ancestors(r.Context(), c.Namespace, g)
		if err != nil {
			kit.WriteKubeError(w, r, "read ancestors", err)
			return
		}
		items = append(items, toGroupJSON(g, hierarchy.NewIndex(ancestors).With(g)))
	}
	slices.SortFunc(items, func(a, b groupJSON) int { return strings.Compare(a.ID, b.ID) })
	httperr.WriteJSON(w, http.StatusOK, kit.PageJSON[groupJSON]{Items: items})
}

func (a *api) patchGroup(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	var req patchGroupRequest
	if !kit.DecodeBody(w, r, &req, false) {
		return
	}
	if req.Hierarchy != nil {
		kit.BadRequest(w, "hierarchy", "hierarchy is immutable after creation: create a new group instead.")
		return
	}
	name := req.Metadata != nil && req.Metadata.Name != nil
	if !name && req.Models == nil {
		kit.BadRequest(w, "metadata.name", "Give metadata.name and/or models: at least one is required.")
		return
	}
	var models []gatewayv1.ModelConfig
	if req.Models != nil {
		var ok bool
		if models, ok = modelsFromJSON(w, *req.Models); !ok {
			return
		}
	}
	id := r.PathValue("group_id")
	if !kit.ValidName(id) {
		kit.BadRequest(w, "group_id", fmt.Sprintf("%q is not a valid group id.", id))
		return
	}
	dry, ok := dryRun(w, r)
	if !ok {
		return
	}
	var opts []client.UpdateOption
	if dry {
		opts = append(opts, client.DryRunAll)
	}
	var g gatewayv1.Group
	err := kit.UpdateOnConflict(func() error {
		if err := a.Opts.Client.Get(r.Context(), client.ObjectKey{Namespace: c.Namespace, Name: id}, &g); err != nil {
			return err
		}
		if g.DeletionTimestamp != nil {
			return apierrors.NewNotFound(gatewayv1.GroupVersion.WithResource("groups").GroupResource(), id)
		}
		if name {
			g.Spec.DisplayName = *req.Metadata.Name
		}
		if req.Models != nil {
			g.Spec.Models = models
		}
		return a.Opts.Client.Update(r.Context(), &g, opts...)
	})
	if apierrors.IsNotFound(err) {
		kit.NotFound(w, "Group", id)
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "update group", err)
		return
	}
	if dry {
		// Nothing was stored: answer the group as it would be, without waiting for a snapshot.
		a.writeGroup(w, r, c, http.StatusOK, &g)
		return
	}
	a.awaitGroup(r.Context(), c.Namespace, &g)
	a.writeGroup(w, r, c, http.StatusOK, &g)
}

func (a *api) deleteGroup(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	g, ok := a.LoadGroup(w, r, c)
	if !ok {
		return
	}
	// The UID precondition makes sure a group re-created under the same id in between is not deleted.
	err := a.Opts.Client.Delete(r.Context(), g, client.Preconditions{UID: &g.UID})
	if apierrors.IsNotFound(err) {
		kit.NotFound(w, "Group", g.Name)
		return
	}
	if err != nil {
		kit.WriteKubeError(w, r, "delete group", err)
		return
	}
	a.AwaitSnapshot(r.Context(), c.Namespace, "delete group "+g.Name, func(s *snapshot.Snapshot) bool {
		return !slices.ContainsFunc(s.Groups, func(sg snapshot.Group) bool { return sg.ID == g.Name })
	})
	a.AwaitUnlisted(r.Context(), g)
	httperr.WriteJSON(w, http.StatusOK, map[string]any{
		"id":         g.Name,
		"metadata":   groupMetaJSON{Name: g.Spec.DisplayName, ExternalEntityID: g.Spec.ExternalEntityID},
		"deleted_at": a.Opts.Clock().UTC().Format(time.RFC3339),
	})
}

// dryRun reads the dry_run query parameter: true runs the write through the API server with dryRun=All (every
// admission webhook and CEL rule judges it) and stores nothing, so a client can check a write before it makes it.
func dryRun(w http.ResponseWriter, r *http.Request) (bool, bool) {
	v, ok := kit.Query(w, r, "dry_run")
	if !ok {
		return false, false
	}
	switch v {
	case "", "false":
		return false, true
	case "true":
		return true, true
	default:
		kit.BadRequest(w, "dry_run", fmt.Sprintf("dry_run must be true or false, not %q.", v))
		return false, false
	}
}

type usageEntryJSON struct {
	Type         string `json:"type"`
	Unit         string `json:"unit"`
	Threshold    int64  `json:"threshold"`
	CurrentUsage int64  `json:"current_usage"`
	ResetAt      string `json:"reset_at"`
	SourceGroup  string `json:"source_group"`
}

// resetAt is when a usage limit of unit u counts from zero again, after now: the next midnight UTC for DAY, the
// first instant of the next month (UTC) for MONTH (limits.Unit.PeriodEnd).
func resetAt(u gatewayv1.LimitUnit, now time.Time) string {
	un, err := limits.ParseUnit(string(u))
	if err != nil || !un.Calendar() {
		return ""
	}
	return un.PeriodEnd(now).Format(time.RFC3339)
}

// groupUsage reports every DAY and MONTH limit in force for the group, its own and those it inherits (its effective
// models), each with source_group and the usage of the counter that limit charges for the group's calls
// (hierarchy.MeteringGroup): the group's own in INDEPENDENT mode, the declaring ancestor's shared pool in
// CASCADING mode. A child held at 20 of 20 by an inherited limit therefore shows 20 of 20.
func (a *api) groupUsage(w http.ResponseWriter, r *http.Request, c auth.Caller) {
	g, ok := a.LoadGroup(w, r, c)
	if !ok {
		return
	}
	if a.Opts.Usage == nil {
		httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "Usage counters are not available on this gatewayd.", nil)
		return
	}
	now := a.Opts.Clock().UTC()
	usage := map[string][]usageEntryJSON{}
	ancestors, err := a.ancestors(r.Context(), c.Namespace, g)
	if err != nil {
		kit.WriteKubeError(w, r, "read ancestors", err)
		return
	}
	chain, _ := hierarchy.NewIndex(ancestors).With(g).Chain(g)
	for _, m := range hierarchy.Resolve(chain) {
		for _, l := range m.UsageLimits {
			if !gatewayv1.UsageLimitKind.Takes(l.Unit) {
				continue
			}
			metered := hierarchy.MeteringGroup(g.Enforcement(), g.Name, l.SourceGroup)
			n, err := a.Opts.Usage.Usage(r.Context(), c.Namespace, metered, m.Slug, string(l.Type), string(l.Unit), now)
			if err != nil {
				httperr.Write(w, http.StatusServiceUnavailable, httperr.CodeUnavailable, "Usage counters are unavailable; retry shortly.", nil)
				return
			}
			usage[m.Slug] = append(usage[m.Slug], usageEntryJSON{
				Type: string(l.Type), Unit: string(l.Unit), Threshold: l.Threshold, CurrentUsage: n, ResetAt: resetAt(l.Unit, now),
				SourceGroup: l.SourceGroup,
			})
		}
	}
	httperr.WriteJSON(w, http.StatusOK, map[string]any{
		"group_id":           g.Name,
		"external_entity_id": g.Spec.ExternalEntityID,
		"usage":              usage,
	})
}

// liveGroups lists the namespace's groups that are not being deleted, sorted by id.
func (a *api) liveGroups(ctx context.Context, ns string) ([]*gatewayv1.Group, error) {
	var list gatewayv1.GroupList
	// Read only: the items may be the cache's own objects.
	if err := a.ListReader().List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make([]*gatewayv1.Group, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out = append(out, &list.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b *gatewayv1.Group) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// writeGroup answers g with its effective models, resolved over its ancestors.
func (a *api) writeGroup(w http.ResponseWriter, r *http.Request, c auth.Caller, status int, g *gatewayv1.Group) {
	ancestors, err := a.ancestors(r.Context(), c.Namespace, g)
	if err != nil {
		kit.WriteKubeError(w, r, "read ancestors", err)
		return
	}
	httperr.WriteJSON(w, status, toGroupJSON(g, hierarchy.NewIndex(ancestors).With(g)))
}

// ancestors reads the live ancestors of g one Get each (at most MaxDepth), so that answering a write costs the
// same in a workspace of any size.
func (a *api) ancestors(ctx context.Context, ns string, g *gatewayv1.Group) ([]*gatewayv1.Group, error) {
	return hierarchy.FetchAncestors(g, func(id string) (*gatewayv1.Group, error) {
		p := &gatewayv1.Group{}
		err := a.Opts.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, p)
		if apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
			return nil, nil
		}
		return p, err
	})
}

// awaitGroup waits until the snapshot holds g with exactly the effective models the write implies, then until the
// list routes' cache holds g as written (a rename is not in the snapshot).
func (a *api) awaitGroup(ctx context.Context, ns string, g *gatewayv1.Group) {
	defer a.AwaitListed(ctx, g)
	ancestors, err := a.ancestors(ctx, ns, g)
	if err != nil {
		return
	}
	chain, _ := hierarchy.NewIndex(ancestors).With(g).Chain(g)
	want := fingerprint(hierarchy.SnapshotModels(chain))
	a.AwaitSnapshot(ctx, ns, "group "+g.Name, func(s *snapshot.Snapshot) bool {
		for _, sg := range s.Groups {
			if sg.ID == g.Name {
				return fingerprint(sg.Models) == want
			}
		}
		return false
	})
}

// fingerprint is models as one string, whatever the order of their limits.
func fingerprint(ms []snapshot.Model) string {
	var parts []string
	for _, m := range ms {
		for _, l := range append(slices.Clone(m.RateLimits), m.UsageLimits...) {
			parts = append(parts, fmt.Sprintf("%s|%s|%s|%d|%s", m.Slug, l.Type, l.Unit, l.Threshold, l.SourceGroup))
		}
		parts = append(parts, m.Slug)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func toGroupJSON(g *gatewayv1.Group, ix *hierarchy.Index) groupJSON {
	out := groupJSON{
		ID:              g.Name,
		Metadata:        groupMetaJSON{Name: g.Spec.DisplayName, ExternalEntityID: g.Spec.ExternalEntityID},
		Models:          make([]modelJSON, 0, len(g.Spec.Models)),
		EffectiveModels: []effectiveModelJSON{},
		Hierarchy:       hierarchyJSON{LimitEnforcement: string(g.Enforcement()), ParentGroupID: g.Spec.Hierarchy.ParentGroupID},
		CreatedAt:       g.CreationTimestamp.UTC().Format(time.RFC3339),
	}
	for _, m := range g.Spec.Models {
		out.Models = append(out.Models, modelJSON{Slug: m.Slug, RateLimits: limitsJSON(m.RateLimits), UsageLimits: limitsJSON(m.UsageLimits)})
	}
	chain, _ := ix.Chain(g)
	for _, em := range hierarchy.Resolve(chain) {
		out.EffectiveModels = append(out.EffectiveModels, effectiveModelJSON{
			Slug: em.Slug, RateLimits: effectiveJSON(em.RateLimits), UsageLimits: effectiveJSON(em.UsageLimits),
		})
	}
	return out
}

func limitsJSON(ls []gatewayv1.Limit) []limitJSON {
	out := make([]limitJSON, 0, len(ls))
	for _, l := range ls {
		out = append(out, limitJSON{Type: string(l.Type), Unit: string(l.Unit), Threshold: l.Threshold})
	}
	return out
}

func effectiveJSON(ls []gatewayv1.EffectiveLimit) []effectiveLimitJSON {
	out := make([]effectiveLimitJSON, 0, len(ls))
	for _, l := range ls {
		out = append(out, effectiveLimitJSON{
			limitJSON:   limitJSON{Type: string(l.Type), Unit: string(l.Unit), Threshold: l.Threshold},
			SourceGroup: l.SourceGroup,
		})
	}
	return out
}

// modelsFromJSON converts input models, refusing the few things the CRD cannot name in API terms: duplicate
// slugs and limits of unknown type or unit. Everything else (units per limit kind, one limit per type,
// thresholds) is left to the CRD's CEL rules so there is one source of truth.
func modelsFromJSON(w http.ResponseWriter, in []modelJSON) ([]gatewayv1.ModelConfig, bool) {
	out := make([]gatewayv1.ModelConfig, 0, len(in))
	seen := map[string]bool{}
	for i, m := range in {
		path := fmt.Sprintf("models[%d]", i)
		if m.Slug == "" {
			kit.BadRequest(w, path+".slug", path+".slug is required.")
			return nil, false
		}
		if seen[m.Slug] {
			kit.BadRequest(w, path+".slug", fmt.Sprintf("%s.slug %q appears twice; each slug may appear once.", path, m.Slug))
			return nil, false
		}
		seen[m.Slug] = true
		rate, ok := limitsFromJSON(w, path+".rate_limits", gatewayv1.RateLimitKind, m.RateLimits)
		if !ok {
			return nil, false
		}
		usage, ok := limitsFromJSON(w, path+".usage_limits", gatewayv1.UsageLimitKind, m.UsageLimits)
		if !ok {
			return nil, false
		}
		out = append(out, gatewayv1.ModelConfig{Slug: m.Slug, RateLimits: rate, UsageLimits: usage})
	}
	return out, true
}

// limitsFromJSON reads the limits of one list, kind's: each of a type and a unit that kind takes (a COST limit
// is a usage limit only; docs/limits.md).
func limitsFromJSON(w http.ResponseWriter, path string, kind gatewayv1.LimitKind, in []limitJSON) ([]gatewayv1.Limit, bool) {
	var out []gatewayv1.Limit
	for j, l := range in {
		p := fmt.Sprintf("%s[%d]", path, j)
		if !slices.Contains(gatewayv1.LimitTypes, gatewayv1.LimitType(l.Type)) {
			kit.BadRequest(w, p+".type", p+".type must be TOKEN, REQUEST or COST.")
			return nil, false
		}
		if !kind.Counts(gatewayv1.LimitType(l.Type)) {
			kit.BadRequest(w, p+".type", fmt.Sprintf("%s.type %s is not a rate limit: rate limits take TOKEN or REQUEST; COST is a usage limit only, unit DAY or MONTH.", p, l.Type))
			return nil, false
		}
		if !slices.Contains(gatewayv1.LimitUnits, gatewayv1.LimitUnit(l.Unit)) {
			kit.BadRequest(w, p+".unit", p+".unit must be SECOND or MINUTE (rate limits), DAY or MONTH (usage limits).")
			return nil, false
		}
		if l.Threshold < 1 {
			kit.BadRequest(w, p+".threshold", p+".threshold must be at least 1.")
			return nil, false
		}
		out = append(out, gatewayv1.Limit{Type: gatewayv1.LimitType(l.Type), Unit: gatewayv1.LimitUnit(l.Unit), Threshold: l.Threshold})
	}
	return out, true
}

// parentDeleting reports whether err is admission's refusal of a child whose parent is being deleted (the group
// webhook's parentNotDeleting: a Forbidden cause on spec.hierarchy.parentGroupID).
func parentDeleting(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	return slices.ContainsFunc(st.Status().Details.Causes, func(c metav1.StatusCause) bool {
		return c.Type == metav1.CauseTypeForbidden && c.Field == "spec.hierarchy.parentGroupID"
	})
}
