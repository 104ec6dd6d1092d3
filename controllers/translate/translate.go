// Package translate turns the custom resources of one workspace into the snapshot gatewayd serves. It is pure:
// the materializer lists the objects and hands them over, and nothing here talks to an API server, so the whole
// translation is golden-tested. It also holds the rules that decide what is served (group verdicts, key
// credentials, which of two duplicates wins), so the reconcilers report in status exactly what is materialized.
package translate

import (
	"cmp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
)

// Default Secret entries, used when a reference leaves its key empty.
const (
	DefaultAPIKeyEntry        = gatewayv1.DefaultKeySecretEntry
	DefaultWebhookSecretEntry = "secret"
)

// Input is every object of one workspace (namespace) that the snapshot depends on.
type Input struct {
	Namespace        string
	Workspaces       []gatewayv1.Workspace
	Groups           []gatewayv1.Group
	APIKeys          []gatewayv1.APIKey
	WorkspaceAPIKeys []gatewayv1.WorkspaceAPIKey
	Endpoints        []gatewayv1.Endpoint
	Models           []gatewayv1.Model
	ModelDeployments []gatewayv1.ModelDeployment
	Teams            []gatewayv1.Team
	Chains           []gatewayv1.Chain
	ChainDeployments []gatewayv1.ChainDeployment
}

// Translate builds the snapshot of one workspace. Only what can be served is in it: Ready groups (see
// Groups.Judge) with effective models resolved here rather than read from a status that may lag; keys with a
// known prefix and hash whose group is served and whose prefix is not held by an older key, less the PERSONAL
// keys of people the Workspace no longer lists (see Members); and endpoints whose slug is not held by an older
// endpoint. Every list is sorted.
func Translate(in Input) *snapshot.Snapshot {
	s := translateHead(in)

	groups := make([]*gatewayv1.Group, len(in.Groups))
	for i := range in.Groups {
		groups[i] = &in.Groups[i]
	}
	judge := NewGroups(groups)
	served := make(map[string]bool, len(groups))
	for _, g := range groups {
		v := judge.Judge(g)
		if !v.Ready {
			continue
		}
		served[g.Name] = true
		s.Groups = append(s.Groups, translateGroup(g, v.Chain))
	}
	slices.SortFunc(s.Groups, func(a, b snapshot.Group) int { return strings.Compare(a.ID, b.ID) })

	prefixes := NewPrefixes(in.APIKeys, in.WorkspaceAPIKeys)
	for i := range in.APIKeys {
		k := &in.APIKeys[i]
		prefix, hash, ok := KeyCredentials(k.Spec.KeySource, k.Status)
		if !ok || k.DeletionTimestamp != nil || !served[k.Spec.GroupID] || !prefixes.Owns(KindAPIKey, k.Name, prefix) {
			continue
		}
		s.APIKeys = append(s.APIKeys, snapshot.APIKey{
			ID: k.Name, Prefix: prefix, Hash: hash, GroupID: k.Spec.GroupID, Name: k.Spec.DisplayName,
		})
	}
	slices.SortFunc(s.APIKeys, func(a, b snapshot.APIKey) int { return strings.Compare(a.Prefix, b.Prefix) })

	s.WorkspaceAPIKeys = translateWorkspaceKeys(in, prefixes.Owns)
	return s
}

// translateHead translates everything but the groups and keys, with empty lists of those.
func translateHead(in Input) *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		Namespace:        in.Namespace,
		Workspace:        translateWorkspace(InCharge(in.Workspaces)),
		Groups:           []snapshot.Group{},
		APIKeys:          []snapshot.APIKey{},
		WorkspaceAPIKeys: []snapshot.WorkspaceAPIKey{},
		Endpoints:        []snapshot.Endpoint{},
		Models:           translateModels(in.Models),
		Deployments:      translateDeployments(in.ModelDeployments),
		Teams:            translateTeams(in.Teams),
	}
	s.Chains, s.ChainDeployments = translateChains(in.Chains, in.ChainDeployments)

	slugs := NewSlugs(in.Endpoints)
	for i := range in.Endpoints {
		e := &in.Endpoints[i]
		if e.DeletionTimestamp != nil || !slugs.Owns(e) {
			continue
		}
		s.Endpoints = append(s.Endpoints, translateEndpoint(e))
	}
	slices.SortFunc(s.Endpoints, func(a, b snapshot.Endpoint) int { return strings.Compare(a.Slug, b.Slug) })
	return s
}

// translateWorkspaceKeys lists the workspace keys that are served: known credentials, not being deleted, holding
// their prefix (owns, as Prefixes.Owns), not PERSONAL keys of someone the Workspace no longer lists, who
// stops authenticating with this snapshot, before the manager has deleted the key, and not team keys bound to a
// Team that is gone (TeamBindings).
func translateWorkspaceKeys(in Input, owns func(kind, name, prefix string) bool) []snapshot.WorkspaceAPIKey {
	out := []snapshot.WorkspaceAPIKey{}
	members := NewMembers(InCharge(in.Workspaces))
	teams := NewTeamBindings(in.Teams)
	for i := range in.WorkspaceAPIKeys {
		k := &in.WorkspaceAPIKeys[i]
		prefix, hash, ok := KeyCredentials(k.Spec.KeySource, k.Status)
		if !ok || k.DeletionTimestamp != nil || !owns(KindWorkspaceAPIKey, k.Name, prefix) || members.Deprovisioned(k) || !teams.Bound(k) {
			continue
		}
		out = append(out, translateWorkspaceKey(k, prefix, hash))
	}
	slices.SortFunc(out, func(a, b snapshot.WorkspaceAPIKey) int { return strings.Compare(a.Prefix, b.Prefix) })
	return out
}

func translateGroup(g *gatewayv1.Group, chain hierarchy.Chain) snapshot.Group {
	return snapshot.Group{
		ID:               g.Name,
		ExternalEntityID: g.Spec.ExternalEntityID,
		DisplayName:      g.Spec.DisplayName,
		ParentID:         g.ParentID(),
		Mode:             string(chain.Root().Enforcement()),
		Depth:            len(chain),
		Models:           hierarchy.SnapshotModels(chain),
	}
}

// translateWorkspace takes the settings of the Workspace in charge (see InCharge).
func translateWorkspace(ws *gatewayv1.Workspace) snapshot.Workspace {
	if ws == nil {
		return snapshot.Workspace{}
	}
	out := snapshot.Workspace{Name: ws.Name}
	if r := ws.Spec.KeyRegistration; r != nil {
		out.KeyRegistrationPublicKey = r.PublicKey
	}
	if a := ws.Spec.AsyncWebhook; a != nil {
		ref := secretRef(a.SecretRef, DefaultWebhookSecretEntry)
		out.AsyncWebhookSecret = &ref
	}
	if b := ws.Spec.BillingWebhook; b != nil {
		out.BillingWebhook = &snapshot.BillingWebhook{URL: b.URL, Secret: secretRef(b.SecretRef, DefaultWebhookSecretEntry)}
	}
	limits := ws.Spec.ModelAPILimits
	if limits == nil {
		limits = ws.Spec.ModelAPITier //nolint:staticcheck // the former name is honoured until it is removed
	}
	if limits != nil {
		out.ModelAPILimits = &snapshot.ModelAPILimits{RequestsPerMinute: limits.RequestsPerMinute, TokensPerMinute: limits.TokensPerMinute}
	}
	if ws.Spec.Members != nil {
		out.MembershipManaged = true
		out.Members = make([]snapshot.Member, len(ws.Spec.Members))
		for i, m := range ws.Spec.Members {
			out.Members[i] = snapshot.Member{UserID: m.UserID, Role: string(m.Role)}
		}
		sortMembers(out.Members)
	}
	return out
}

// translateTeams lists the teams that are not being deleted, sorted by ID. Only the DefaultTeam is marked
// default.
func translateTeams(in []gatewayv1.Team) []snapshot.Team {
	var out []snapshot.Team
	def := DefaultTeam(in)
	for i := range in {
		t := &in[i]
		if t.DeletionTimestamp != nil {
			continue
		}
		st := snapshot.Team{ID: t.Name, Name: t.Spec.DisplayName, Default: t == def}
		for _, m := range t.Spec.Members {
			st.Members = append(st.Members, snapshot.Member{UserID: m.UserID, Role: string(m.Role)})
		}
		sortMembers(st.Members)
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b snapshot.Team) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func sortMembers(ms []snapshot.Member) {
	slices.SortFunc(ms, func(a, b snapshot.Member) int { return strings.Compare(a.UserID, b.UserID) })
}

func translateWorkspaceKey(k *gatewayv1.WorkspaceAPIKey, prefix, hash string) snapshot.WorkspaceAPIKey {
	out := snapshot.WorkspaceAPIKey{
		ID: k.Name, Prefix: prefix, Hash: hash, Type: string(k.Spec.Type), Name: k.Spec.DisplayName, TeamID: k.Spec.TeamID,
		Models: sortedCopy(k.Spec.Models), Environments: sortedCopy(k.Spec.Environments),
	}
	if c := k.Creator(); c != nil {
		out.CreatedBy = &snapshot.KeyCreator{UserID: c.UserID, APIKeyPrefix: c.APIKeyPrefix}
	}
	if o := k.Spec.Owner; o != nil {
		role := o.Role
		if role == "" {
			role = gatewayv1.OrgRoleMember
		}
		out.Owner = &snapshot.KeyOwner{UserID: o.UserID, Email: o.Email, Name: o.Name, Role: string(role)}
	}
	return out
}

func translateEndpoint(e *gatewayv1.Endpoint) snapshot.Endpoint {
	out := snapshot.Endpoint{ID: e.Name, Slug: e.Spec.Slug, Targets: make([]snapshot.Target, len(e.Spec.Targets)), SharedModelAPI: e.Spec.SharedModelAPI}
	for i, t := range e.Spec.Targets {
		out.Targets[i] = snapshot.Target{
			Name: gatewayv1.TargetName(i, t.Name), Provider: string(t.Provider), BaseURL: t.BaseURL, TargetModel: t.TargetModel,
			// The API server defaults weight to 1; an object read from elsewhere may not carry it.
			Weight: max(t.Weight, 1), Priority: t.Priority, APIVersion: t.APIVersion, Region: t.Region,
		}
		if t.APIKeySecretRef != nil {
			ref := secretRef(*t.APIKeySecretRef, DefaultAPIKeyEntry)
			out.Targets[i].APIKeySecret = &ref
		}
		if p := t.Pricing; p != nil {
			out.Targets[i].Pricing = &snapshot.Pricing{InputPerMillionTokens: p.InputPerMillionTokens, OutputPerMillionTokens: p.OutputPerMillionTokens}
		}
	}
	if e.Spec.Timeout != nil {
		out.TimeoutMillis = e.Spec.Timeout.Milliseconds()
	}
	// Retry and cooldown stay nil when the spec has none, so gatewayd applies its defaults and the snapshot of an
	// Endpoint written before they existed is unchanged.
	if r := e.Spec.Retry; r != nil {
		out.Retry = &snapshot.Retry{Attempts: r.Attempts, OnStatus: slices.Clone(r.OnStatus)}
	}
	if c := e.Spec.Cooldown; c != nil {
		out.Cooldown = &snapshot.Cooldown{Failures: c.Failures}
		if c.Duration != nil {
			out.Cooldown.DurationMillis = c.Duration.Milliseconds()
		}
	}
	return out
}

func secretRef(s gatewayv1.SecretKeySelector, defaultKey string) snapshot.SecretRef {
	return snapshot.SecretRef{Name: s.Name, Key: cmp.Or(s.Key, defaultKey)}
}

func sortedCopy(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return out
}

// Older reports whether a was created before b, by creationTimestamp and then name, so that of two objects
// claiming the same unique value the same one wins in every reconciler and in every snapshot.
func Older(a, b metav1.Object) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}

// Slugs decides which Endpoint holds each slug: the oldest that is not being deleted.
type Slugs struct {
	owner map[string]*gatewayv1.Endpoint
}

// NewSlugs indexes endpoints by slug.
func NewSlugs(endpoints []gatewayv1.Endpoint) *Slugs {
	s := &Slugs{owner: map[string]*gatewayv1.Endpoint{}}
	for i := range endpoints {
		e := &endpoints[i]
		if e.DeletionTimestamp != nil {
			continue
		}
		if cur, ok := s.owner[e.Spec.Slug]; !ok || Older(e, cur) {
			s.owner[e.Spec.Slug] = e
		}
	}
	return s
}

// Owns reports whether e holds its slug.
func (s *Slugs) Owns(e *gatewayv1.Endpoint) bool {
	cur, ok := s.owner[e.Spec.Slug]
	return ok && cur.Name == e.Name
}

// Owner returns the name of the Endpoint that holds slug.
func (s *Slugs) Owner(slug string) string {
	if cur, ok := s.owner[slug]; ok {
		return cur.Name
	}
	return ""
}

// TeamBindings are the UIDs of the workspace's Teams that are not being deleted, by name.
type TeamBindings map[string]string

// NewTeamBindings reads the Teams.
func NewTeamBindings(teams []gatewayv1.Team) TeamBindings {
	b := make(TeamBindings, len(teams))
	for i := range teams {
		if teams[i].DeletionTimestamp == nil {
			b[teams[i].Name] = string(teams[i].UID)
		}
	}
	return b
}

// Bound reports whether key k may be served as far as its Team goes: a key bound to a Team
// (gatewayv1.AnnotationTeamUID) only while that Team, the same object, exists and is not being deleted, so a
// deleted Team's keys stop at once and never attach to a new Team of the same name. A key with no binding (no
// team, or admitted before its Team existed) is not judged here (docs/security.md "Team keys are bound to their
// Team").
func (b TeamBindings) Bound(k *gatewayv1.WorkspaceAPIKey) bool {
	return !k.TeamRevoked(b[k.Spec.TeamID])
}
