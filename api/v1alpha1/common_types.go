package v1alpha1

import (
	"net"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types and reasons shared by the kinds of this package.
const (
	// ConditionReady is True when the object is valid, resolved and part of the published snapshot.
	ConditionReady = "Ready"

	ReasonReady             = "Ready"
	ReasonParentNotFound    = "ParentNotFound"
	ReasonInvalid           = "Invalid"
	ReasonGroupNotFound     = "GroupNotFound"
	ReasonGroupNotReady     = "GroupNotReady"
	ReasonSecretNotFound    = "SecretNotFound"
	ReasonSecretInvalid     = "SecretInvalid"
	ReasonDuplicatePrefix   = "DuplicatePrefix"
	ReasonDuplicateSlug     = "DuplicateSlug"
	ReasonDuplicateExternal = "DuplicateExternalEntityID"
	ReasonDeleting          = "Deleting"

	// ConditionLimitConflict is True on a CASCADING group that declares a limit above an ancestor's: admission
	// refuses that, but two racing writes can store it. The group stays served; the ancestor's limit binds.
	ConditionLimitConflict = "LimitConflict"
	// ReasonChildExceedsParentLimit is the reason of a True LimitConflict, and of its Event.
	ReasonChildExceedsParentLimit = "ChildExceedsParentLimit"
	// ReasonNoConflict is the reason of a False LimitConflict.
	ReasonNoConflict = "NoConflict"

	// ReasonBoundGroupGone is the reason of the Event of a Group or APIKey deleted because the group it was
	// admitted under (AnnotationParentUID) is gone.
	ReasonBoundGroupGone = "BoundGroupGone"

	// Reasons of a Workspace's Ready condition.
	ReasonDuplicateWorkspace = "DuplicateWorkspace"
	ReasonSnapshotPending    = "SnapshotPending"
)

// Labels that mark what a Secret may be used for. gatewayd sends a Secret to an upstream only when it carries
// LabelUpstreamCredential and not LabelKeyMaterial, so an Endpoint cannot be pointed at a Secret holding one of
// the workspace's own keys or webhook secrets and have gatewayd send it to a server of the caller's choosing.
const (
	// LabelUpstreamCredential, set to "true" by the operator, allows a Secret as an Endpoint's apiKeySecretRef.
	LabelUpstreamCredential = "gateway.modelgate.io/upstream-credential"
	// LabelKeyMaterial marks Secrets that hold a modelgate key; the controller sets it on the Secrets it mints.
	// A Secret carrying it is never an upstream credential, whatever its other labels.
	LabelKeyMaterial = "gateway.modelgate.io/key-material"
)

// IsUpstreamCredential reports whether a Secret with these labels may be sent to an upstream.
func IsUpstreamCredential(labels map[string]string) bool {
	_, key := labels[LabelKeyMaterial]
	return labels[LabelUpstreamCredential] == "true" && !key
}

// AnnotationUpstreamHosts, set by the operator on an upstream credential Secret, lists the hosts its key may be
// sent to, separated by commas: `api.openai.com`, `host:8443` (that port only; without a port, any port), or
// `*.example.com` (any host below example.com). An Endpoint whose baseURL names another host is refused at
// admission and gatewayd does not send the key there (docs/security.md).
const AnnotationUpstreamHosts = "gateway.modelgate.io/upstream-hosts"

// UpstreamHostAllowed reports whether a Secret with these annotations may be sent to the host of rawURL, and
// whether the Secret lists its hosts at all: a Secret without AnnotationUpstreamHosts allows every host, the
// behaviour of Secrets labelled before hosts were bound (docs/operations.md says how to migrate).
func UpstreamHostAllowed(annotations map[string]string, rawURL string) (allowed, listed bool) {
	list, listed := annotations[AnnotationUpstreamHosts]
	if !listed {
		return true, false
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return false, true
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	for _, entry := range strings.Split(list, ",") {
		entry = strings.ToLower(strings.TrimSpace(entry))
		if entry == "" {
			continue
		}
		name, entryPort := entry, ""
		if h, p, err := net.SplitHostPort(entry); err == nil {
			name, entryPort = h, p
		}
		if entryPort != "" && entryPort != port {
			continue
		}
		if suffix, ok := strings.CutPrefix(name, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true, true
			}
			continue
		}
		if strings.Trim(name, "[]") == host {
			return true, true
		}
	}
	return false, true
}

// Finalizer is placed on Groups so that deleting one removes its whole subtree and keys, with or without a
// garbage collector.
const Finalizer = "gateway.modelgate.io/cascade"

// SecretKeySelector names one entry of a Secret in the same namespace.
type SecretKeySelector struct {
	// name is the name of the Secret, in the namespace of the referring object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key is the entry of the Secret's data that holds the value. Defaults differ per use and are given there.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]*$`
	Key string `json:"key,omitempty"`
}

// DefaultKeySecretEntry is the Secret entry a key's spec.secretRef (and an upstream's API key reference) reads
// when it names none.
const DefaultKeySecretEntry = "api_key"

// KeySource says where the secret of an API key comes from. Exactly one source applies:
//   - hash (with prefix): the SHA-256 of a key minted or registered through the REST API, which never stores plaintext;
//   - secretRef: a key the user brings, read from a Secret (GitOps);
//   - neither: the controller mints a key and writes it to a Secret named in status.
type KeySource struct {
	// prefix is the first 16 characters of the key, used to find it at request time. Set together with hash.
	// +optional
	// +kubebuilder:validation:MinLength=16
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[!-~]+$`
	Prefix string `json:"prefix,omitempty"`

	// hash is the lowercase hex SHA-256 of the whole key. The plaintext is never stored.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	Hash string `json:"hash,omitempty"`

	// secretRef names a Secret entry (key defaults to "api_key") that holds the whole key, for keys brought by the user.
	// +optional
	SecretRef *SecretKeySelector `json:"secretRef,omitempty"`
}

// KeyStatus is the observed state shared by federated and workspace keys.
type KeyStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// prefix is the key's prefix, derived from whichever source the key has.
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// hash is the lowercase hex SHA-256 of the key, derived from its source. Never the plaintext.
	// +optional
	Hash string `json:"hash,omitempty"`

	// secretName is the Secret that holds a key minted by the controller (entry "api_key").
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// conditions report whether the key is usable (Ready) and why not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}
