package webhooks

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Claims make uniqueness within a workspace atomic where etcd makes it atomic: on a create. A value that must be
// unique (a Group's external id, a key prefix across APIKeys and WorkspaceAPIKeys) is claimed during admission by
// creating a ConfigMap named after it, which only one writer can create; every other concurrent admission finds
// it and is refused. A list of the other objects, as the checks before claims did, cannot see an object another
// admission is about to store, so two concurrent creates could both pass.
//
// A claim names its holder (kind, name, uid). It is stale, and can be taken over, when its holder is being
// deleted, holds another value now, or is gone; "gone" counts only once the holder took the claim longer than
// claimGrace ago (gatewayv1.ClaimDataClaimedAt), since an admission in flight has claimed before its object is
// stored. A take-over is an update with the claim's resourceVersion, so two takers cannot both win; it stamps the
// time anew, as does a holder taking its claim again (a key renamed back), so that the key reconciler, which
// deletes a key name's claim once no key holds it, leaves alone a claim an admission in flight holds.
//
// A key prefix is revoked for good when its key is deleted: the prefix and the key's hash go into the workspace's
// revocation records (at most gatewayv1.RevokedShards ConfigMaps, however many keys are revoked) and the claim is
// freed; no key can take that prefix again, so a replayed signed registration cannot bring a revoked key back.
// Tombstones written before the records (a claim marked revoked) keep refusing their prefix.

const (
	claimExternalID = "external-id"
	claimKeyPrefix  = gatewayv1.ClaimKindKeyPrefix
	// claimKeyName claims a WorkspaceAPIKey's displayName within its name scope (WorkspaceAPIKey.NameClaim).
	claimKeyName = gatewayv1.ClaimKindKeyName
	// claimRevokedShard labels the ConfigMaps of revocation records (gatewayv1.RevokedShardName).
	claimRevokedShard = "revoked"

	claimValue      = gatewayv1.ClaimDataValue
	claimHolderKind = gatewayv1.ClaimDataHolderKind
	claimHolderName = gatewayv1.ClaimDataHolderName
	claimHolderUID  = gatewayv1.ClaimDataHolderUID
	claimRevoked    = gatewayv1.ClaimDataRevoked
	claimHash       = gatewayv1.ClaimDataHash
)

// claimGrace is how long a claim whose holder does not exist is kept for an admission in flight.
const claimGrace = gatewayv1.ClaimGrace

// claimant is the object that claims a value.
type claimant struct {
	kind, name string
	uid        types.UID
}

func claimantOf(kind string, o client.Object) claimant {
	return claimant{kind: kind, name: o.GetName(), uid: o.GetUID()}
}

// claimer takes, releases and revokes claims. Writer writes the ConfigMaps; Reader reads past any cache.
type claimer struct {
	Writer client.Writer
	Reader client.Reader
	// now is the clock of claimGrace; time.Now when nil.
	now func() time.Time
	// current reads what the holder of a claim of kind holds now: whether it exists, is being deleted, and the
	// value of that kind it claims.
	current func(ctx context.Context, ns, kind string, h claimant) (value string, exists, deleting bool, err error)
}

// claimRefusal is why a value could not be claimed.
type claimRefusal struct {
	holder  claimant
	revoked bool
}

// take claims value of kind in ns for c. It returns a refusal when another live holder has it or it was revoked.
// On a dry run nothing is written, and only a visible holder refuses. A key prefix is checked against the
// revocation records once claimed: revoke writes the record before it frees the claim, so a take that gets the
// claim after a revocation sees its record.
func (cl *claimer) take(ctx context.Context, ns, kind, value string, c claimant) (*claimRefusal, error) {
	refusal, err := cl.claim(ctx, ns, kind, value, c)
	if err != nil || refusal != nil || kind != claimKeyPrefix {
		return refusal, err
	}
	revoked, err := cl.revoked(ctx, ns, value)
	if err != nil || !revoked {
		return nil, err
	}
	if err := cl.release(ctx, ns, kind, value, c); err != nil {
		log.FromContext(ctx).Error(err, "Failed to release the claim of a revoked prefix", "prefix", value)
	}
	return &claimRefusal{revoked: true}, nil
}

// claim is take without the revocation records.
func (cl *claimer) claim(ctx context.Context, ns, kind, value string, c claimant) (*claimRefusal, error) {
	dryRun := isDryRun(ctx)
	want := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.ClaimName(kind, value),
		Labels: map[string]string{gatewayv1.LabelClaim: kind}}, Data: map[string]string{claimValue: value}}
	cl.setHolder(want, c)
	for attempt := 0; attempt < 3; attempt++ {
		if !dryRun {
			err := cl.Writer.Create(ctx, want)
			if err == nil {
				return nil, nil
			}
			if !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("failed to claim %s %q: %w", kind, value, err)
			}
		}
		var have corev1.ConfigMap
		err := cl.Reader.Get(ctx, client.ObjectKeyFromObject(want), &have)
		if apierrors.IsNotFound(err) {
			if dryRun {
				return nil, nil
			}
			continue // released meanwhile: create again
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read the claim of %s %q: %w", kind, value, err)
		}
		holder := holderOf(&have)
		if gatewayv1.ClaimRevoked(have.Data) {
			return &claimRefusal{holder: holder, revoked: true}, nil
		}
		if holder.kind == c.kind && holder.name == c.name {
			// The same object again (a key renamed back, or re-created under its name): it keeps its claim, stamped
			// anew so that nobody deletes it as a claim its holder gave up while this admission is in flight.
			if dryRun {
				return nil, nil
			}
			cl.setHolder(&have, c)
			err := cl.Writer.Update(ctx, &have)
			if err == nil {
				return nil, nil
			}
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("failed to take the claim %s again: %w", have.Name, err)
			}
			continue // changed or released meanwhile: judge it again
		}
		stale, err := cl.stale(ctx, ns, kind, value, &have, holder)
		if err != nil {
			return nil, err
		}
		if !stale {
			return &claimRefusal{holder: holder}, nil
		}
		if dryRun {
			return nil, nil
		}
		return cl.takeOver(ctx, &have, c, holder)
	}
	return nil, fmt.Errorf("failed to claim %s %q: it kept changing", kind, value)
}

// stale reports whether holder no longer holds the claim have: it is being deleted, holds another value, or is
// gone (once its holder took it longer than claimGrace ago).
func (cl *claimer) stale(ctx context.Context, ns, kind, value string, have *corev1.ConfigMap, holder claimant) (bool, error) {
	current, exists, deleting, err := cl.current(ctx, ns, kind, holder)
	if err != nil {
		return false, err
	}
	if exists {
		return deleting || current != value, nil
	}
	return cl.clock().Sub(gatewayv1.ClaimedAt(have.Data, have.CreationTimestamp.Time)) > claimGrace, nil
}

// takeOver gives the claim have to c, on the condition that nobody changed it since it was read.
func (cl *claimer) takeOver(ctx context.Context, have *corev1.ConfigMap, c claimant, from claimant) (*claimRefusal, error) {
	cl.setHolder(have, c)
	if err := cl.Writer.Update(ctx, have); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Another writer took or released it first: refuse rather than guess.
			return &claimRefusal{holder: from}, nil
		}
		return nil, fmt.Errorf("failed to take over the claim %s: %w", have.Name, err)
	}
	return nil, nil
}

// release deletes the claim of value of kind when c still holds it: c is going away for good. It is conditional
// on the claim read, so a claim another admission took meanwhile stays. On a dry run nothing is written.
func (cl *claimer) release(ctx context.Context, ns, kind, value string, c claimant) error {
	if isDryRun(ctx) {
		return nil
	}
	var have corev1.ConfigMap
	err := cl.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: gatewayv1.ClaimName(kind, value)}, &have)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("failed to read the claim of %s %q: %w", kind, value, err)
	}
	if gatewayv1.ClaimRevoked(have.Data) || holderOf(&have) != c {
		return nil
	}
	err = cl.Writer.Delete(ctx, &have, client.Preconditions{UID: &have.UID, ResourceVersion: &have.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("failed to release the claim of %s %q: %w", kind, value, err)
	}
	return nil
}

// revoke records the prefix of a deleted key as revoked, with its hash, in the workspace's revocation records
// (gatewayv1.RevokedShardName), then frees its claim, which has done its work. It is kept for good: a revoked key
// never authenticates again, whatever group a replayed registration names. A prefix claimed by another key is not
// this deletion's to revoke. Should the record's shard be full, the claim itself becomes the record (a tombstone,
// as before records were compacted).
func (cl *claimer) revoke(ctx context.Context, ns, prefix, hash string, c claimant) error {
	if isDryRun(ctx) {
		return nil
	}
	key := client.ObjectKey{Namespace: ns, Name: gatewayv1.ClaimName(claimKeyPrefix, prefix)}
	var have corev1.ConfigMap
	err := cl.Reader.Get(ctx, key, &have)
	held := err == nil
	switch {
	case apierrors.IsNotFound(err):
		// A key stored before claims existed: record it all the same.
	case err != nil:
		return err
	case have.Data[claimHolderName] != c.name || have.Data[claimHolderKind] != c.kind:
		return nil // another key's claim: this deletion does not revoke it
	case have.Data[claimRevoked] == "true":
		return nil // already a tombstone
	}
	recorded, err := cl.record(ctx, ns, prefix, hash)
	if err != nil {
		return err
	}
	if recorded {
		if held {
			err := cl.Writer.Delete(ctx, &have, client.Preconditions{UID: &have.UID, ResourceVersion: &have.ResourceVersion})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("failed to free the claim of revoked prefix %s: %w", prefix, err)
			}
		}
		return nil
	}
	return cl.tombstone(ctx, key, prefix, hash, c)
}

// maxRecordBytes is how much of a revocation shard's 1 MiB a record may fill: about 11,000 records a shard.
const maxRecordBytes = 900 << 10

// record adds prefix and hash to the revocation records of ns. It returns false, writing nothing, when the
// prefix's shard is full.
func (cl *claimer) record(ctx context.Context, ns, prefix, hash string) (bool, error) {
	key := client.ObjectKey{Namespace: ns, Name: gatewayv1.RevokedShardName(prefix)}
	for attempt := 0; attempt < 10; attempt++ {
		var shard corev1.ConfigMap
		err := cl.Reader.Get(ctx, key, &shard)
		if apierrors.IsNotFound(err) {
			shard = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name,
				Labels: map[string]string{gatewayv1.LabelClaim: claimRevokedShard}}, Data: map[string]string{prefix: hash}}
			if err := cl.Writer.Create(ctx, &shard); err == nil || !apierrors.IsAlreadyExists(err) {
				return err == nil, err
			}
			continue
		}
		if err != nil {
			return false, fmt.Errorf("failed to read the revocation records %s: %w", key.Name, err)
		}
		if _, ok := shard.Data[prefix]; ok {
			return true, nil
		}
		size := len(prefix) + len(hash)
		for k, v := range shard.Data {
			size += len(k) + len(v)
		}
		if size > maxRecordBytes {
			return false, nil
		}
		if shard.Data == nil {
			shard.Data = map[string]string{}
		}
		shard.Data[prefix] = hash
		if err := cl.Writer.Update(ctx, &shard); err == nil || !apierrors.IsConflict(err) {
			return err == nil, err
		}
	}
	return false, fmt.Errorf("failed to record revoked prefix %s: the revocation records kept changing", prefix)
}

// revoked reports whether prefix is revoked in ns: in the revocation records, or by a tombstone claim.
func (cl *claimer) revoked(ctx context.Context, ns, prefix string) (bool, error) {
	var shard corev1.ConfigMap
	err := cl.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: gatewayv1.RevokedShardName(prefix)}, &shard)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("failed to read the revocation records of prefix %s: %w", prefix, err)
	}
	_, ok := shard.Data[prefix]
	return ok, nil
}

// tombstone marks the prefix claim of a deleted key as revoked, holding its hash, creating it when the key was
// stored before claims existed.
func (cl *claimer) tombstone(ctx context.Context, key client.ObjectKey, prefix, hash string, c claimant) error {
	for attempt := 0; attempt < 3; attempt++ {
		var have corev1.ConfigMap
		err := cl.Reader.Get(ctx, key, &have)
		if apierrors.IsNotFound(err) {
			tomb := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{gatewayv1.LabelClaim: claimKeyPrefix}},
				Data: map[string]string{claimValue: prefix}}
			cl.setHolder(tomb, c)
			tomb.Data[claimRevoked], tomb.Data[claimHash] = "true", hash
			if err := cl.Writer.Create(ctx, tomb); err == nil || !apierrors.IsAlreadyExists(err) {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if have.Data[claimHolderName] != c.name || have.Data[claimHolderKind] != c.kind {
			return nil
		}
		have.Data[claimRevoked], have.Data[claimHash] = "true", hash
		if err := cl.Writer.Update(ctx, &have); err == nil || !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("failed to mark the prefix claim %s revoked: it kept changing", key.Name)
}

// isDryRun reports whether the admission in ctx is a dry run, which must write nothing.
func isDryRun(ctx context.Context) bool {
	req, err := admission.RequestFromContext(ctx)
	return err == nil && req.DryRun != nil && *req.DryRun
}

// holderOf is the claimant a claim names as its holder.
func holderOf(cm *corev1.ConfigMap) claimant {
	return claimant{kind: cm.Data[claimHolderKind], name: cm.Data[claimHolderName], uid: types.UID(cm.Data[claimHolderUID])}
}

// setHolder names c as the holder of cm, taking it now.
func (cl *claimer) setHolder(cm *corev1.ConfigMap, c claimant) {
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[claimHolderKind], cm.Data[claimHolderName], cm.Data[claimHolderUID] = c.kind, c.name, string(c.uid)
	cm.Data[gatewayv1.ClaimDataClaimedAt] = cl.clock().UTC().Format(time.RFC3339Nano)
}

// clock is the time of claimGrace: now, or the test's clock.
func (cl *claimer) clock() time.Time {
	if cl.now != nil {
		return cl.now()
	}
	return time.Now()
}

// refusal is the field error of a value that could not be claimed.
func (r *claimRefusal) fieldError(path *field.Path, value, scope string) *field.Error {
	if r.revoked {
		return field.Forbidden(path, fmt.Sprintf("the key with prefix %s was revoked; a revoked key can never be registered or used again", value))
	}
	return duplicate(path, value, r.holder.kind, r.holder.name, scope)
}

// currentValue reads the claimable values of the kinds that hold claims.
func currentValue(r client.Reader) func(ctx context.Context, ns, kind string, h claimant) (string, bool, bool, error) {
	return func(ctx context.Context, ns, kind string, h claimant) (string, bool, bool, error) {
		var obj client.Object
		switch h.kind {
		case "Group":
			obj = &gatewayv1.Group{}
		case "APIKey":
			obj = &gatewayv1.APIKey{}
		case "WorkspaceAPIKey":
			obj = &gatewayv1.WorkspaceAPIKey{}
		default:
			return "", false, false, nil
		}
		err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.name}, obj)
		if apierrors.IsNotFound(err) {
			return "", false, false, nil
		}
		if err != nil {
			return "", false, false, fmt.Errorf("failed to read %s %s/%s: %w", h.kind, ns, h.name, err)
		}
		if h.uid != "" && obj.GetUID() != h.uid {
			// Another object under the holder's name: the holder itself is gone.
			return "", false, false, nil
		}
		deleting := obj.GetDeletionTimestamp() != nil
		switch o := obj.(type) {
		case *gatewayv1.Group:
			return o.Spec.ExternalEntityID, true, deleting, nil
		case *gatewayv1.APIKey:
			return o.Spec.Prefix, true, deleting, nil
		case *gatewayv1.WorkspaceAPIKey:
			if kind == claimKeyName {
				return o.NameClaim(), true, deleting, nil
			}
			return o.Spec.Prefix, true, deleting, nil
		}
		return "", false, false, nil
	}
}
