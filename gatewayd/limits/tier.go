package limits

// TierGroup is the metering group of the workspace's model-API tier (Workspace.spec.modelAPILimits). Its buckets
// count one key's calls on the OpenAI-compatible routes as a whole, whatever the model, so their Slug holds the
// key's prefix instead of a slug: prefixes are unique within a workspace across both kinds of key. TierGroup is
// not a DNS label, so no Group can ever meter into these buckets.
const TierGroup = "_tier"

// Tier returns the model-API tier limits of the key of prefix in namespace: REQUEST per MINUTE at rpm and TOKEN
// per MINUTE at tpm, each left out when zero (unset). A caller appends them to a group's plan (a federated key on
// a shared model API) or binds them alone (a workspace key), so one Admit charges every bucket or none.
func Tier(namespace, prefix string, rpm, tpm int64) []Limit {
	var out []Limit
	if rpm > 0 {
		out = append(out, Limit{Key: BucketKey{Namespace: namespace, Group: TierGroup, Slug: prefix, Type: Request, Unit: Minute}, Threshold: rpm})
	}
	if tpm > 0 {
		out = append(out, Limit{Key: BucketKey{Namespace: namespace, Group: TierGroup, Slug: prefix, Type: Token, Unit: Minute}, Threshold: tpm})
	}
	return out
}

// IsTier reports whether l is a model-API tier limit rather than a group's.
func (l Limit) IsTier() bool { return l.Key.Group == TierGroup }
