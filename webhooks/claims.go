package webhooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
// deleted, holds another value now, or is gone; "gone" counts only once the claim is older than claimGrace, since
// an admission in flight has claimed before its object is stored. A take-over is an update with the claim's
// resourceVersion, so two takers cannot both win.
//
// A key prefix claim outlives its key: deleting a key marks its claim revoked (a tombstone with the key's hash),
// and no key can take that prefix again, so a replayed signed registration cannot bring a revoked key back.

const (
	// LabelClaim marks claim ConfigMaps; its value is the kind of value claimed.
	LabelClaim = "gateway.modelgate.io/claim"

	claimExternalID = "external-id"
	claimKeyPrefix  = "key-prefix"
	// claimKeyName claims a WorkspaceAPIKey's displayName within its name scope (see keyNameValue).
	claimKeyName = "key-name"

	claimValue      = "value"
	claimHolderKind = "holderKind"
	claimHolderName = "holderName"
	claimHolderUID  = "holderUID"
	claimRevoked    = "revoked"
	claimHash       = "hash"
)

// claimGrace is how long a claim whose holder does not exist is kept for an admission in flight: longer than the
// webhook timeout.
const claimGrace = 30 * time.Second

// ClaimName is the name of the ConfigMap that claims value of kind: the hash keeps any value a valid name.
func ClaimName(kind, value string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + value))
	return "modelgate-claim-" + hex.EncodeToString(sum[:20])
}

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
// On a dry run nothing is written, and only a visible holder refuses.
func (cl *claimer) take(ctx context.Context, ns, kind, value string, c claimant) (*claimRefusal, error) {
	dryRun := isDryRun(ctx)
	want := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ClaimName(kind, value),
		Labels: map[string]string{LabelClaim: kind}}, Data: map[string]string{claimValue: value}}
	setHolder(want, c)
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
		if have.Data[claimRevoked] == "true" {
			return &claimRefusal{holder: holder, revoked: true}, nil
		}
		if holder.kind == c.kind && holder.name == c.name {
			// The same object again (a re-apply, or re-created under its name): it keeps its claim.
			if holder.uid == c.uid || dryRun {
				return nil, nil
			}
			return cl.takeOver(ctx, &have, c, holder)
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
// gone (once the claim is older than claimGrace).
func (cl *claimer) stale(ctx context.Context, ns, kind, value string, have *corev1.ConfigMap, holder claimant) (bool, error) {
	current, exists, deleting, err := cl.current(ctx, ns, kind, holder)
	if err != nil {
		return false, err
	}
	if exists {
		return deleting || current != value, nil
	}
	now := time.Now
	if cl.now != nil {
		now = cl.now
	}
	return now().Sub(have.CreationTimestamp.Time) > claimGrace, nil
}

// takeOver gives the claim have to c, on the condition that nobody changed it since it was read.
func (cl *claimer) takeOver(ctx context.Context, have *corev1.ConfigMap, c claimant, from claimant) (*claimRefusal, error) {
	setHolder(have, c)
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
	err := cl.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ClaimName(kind, value)}, &have)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("failed to read the claim of %s %q: %w", kind, value, err)
	}
	if have.Data[claimRevoked] == "true" || holderOf(&have) != c {
		return nil
	}
	err = cl.Writer.Delete(ctx, &have, client.Preconditions{UID: &have.UID, ResourceVersion: &have.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("failed to release the claim of %s %q: %w", kind, value, err)
	}
	return nil
}

// revoke marks the prefix claim of a deleted key as a tombstone holding its hash, creating it when the key was
// stored before claims existed. It is kept for good: a revoked key never authenticates again, whatever group a
// replayed registration names.
func (cl *claimer) revoke(ctx context.Context, ns, prefix, hash string, c claimant) error {
	if isDryRun(ctx) {
		return nil
	}
	key := client.ObjectKey{Namespace: ns, Name: ClaimName(claimKeyPrefix, prefix)}
	for attempt := 0; attempt < 3; attempt++ {
		var have corev1.ConfigMap
		err := cl.Reader.Get(ctx, key, &have)
		if apierrors.IsNotFound(err) {
			tomb := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name, Labels: map[string]string{LabelClaim: claimKeyPrefix}},
				Data: map[string]string{claimValue: prefix}}
			setHolder(tomb, c)
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
			return nil // another key's claim: this deletion does not revoke it
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

func setHolder(cm *corev1.ConfigMap, c claimant) {
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[claimHolderKind], cm.Data[claimHolderName], cm.Data[claimHolderUID] = c.kind, c.name, string(c.uid)
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
				return keyNameValue(o), true, deleting, nil
			}
			return o.Spec.Prefix, true, deleting, nil
		}
		return "", false, false, nil
	}
}
