{{/*
The permissions of each component, shared by the ClusterRole (namespaces empty: serve every namespace) and the
per-namespace Roles (namespaces listed). docs/rbac.md explains every rule and what RBAC cannot narrow further.
*/}}

{{/* manager.rules: what the reconcilers and admission webhooks need in a served namespace. */}}
{{- define "modelgate.manager.rules" -}}
# These follow config/rbac/role.yaml, which `make manifests` generates from the reconcilers' +kubebuilder:rbac
# markers (test/chart checks that they agree), minus leases, which live in the release namespace only.
# Reconcilers and admission webhooks read every kind; the Group reconciler deletes what hangs below a deleted group,
# and deprovisioning deletes the PERSONAL WorkspaceAPIKeys of people a Workspace no longer lists.
# A Chain's finalizer deletes its ChainDeployments, and a ChainDeployment creates and deletes one ModelDeployment
# per chainlet.
- apiGroups: [gateway.modelgate.io]
  resources: [apikeys, chaindeployments, chains, groups, workspaceapikeys]
  verbs: [get, list, watch, update, patch, delete]
- apiGroups: [gateway.modelgate.io]
  resources: [endpoints, models, teams, workspaces]
  verbs: [get, list, watch, update, patch]
- apiGroups: [gateway.modelgate.io]
  resources: [modeldeployments]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [gateway.modelgate.io]
  resources: [apikeys/status, chaindeployments/status, chains/status, endpoints/status, groups/status, modeldeployments/status, models/status, teams/status, workspaceapikeys/status, workspaces/status]
  verbs: [get, update, patch]
- apiGroups: [gateway.modelgate.io]
  resources: [chaindeployments/finalizers, chains/finalizers, groups/finalizers, modeldeployments/finalizers]
  verbs: [update]
# The SandboxImageBuild reconciler runs imports and builds, and writes the tags onto the SandboxImage's status; the
# BuildKit backend runs a build as a Job it owns.
- apiGroups: [gateway.modelgate.io]
  resources: [sandboximagebuilds, sandboximages]
  verbs: [get, list, watch]
- apiGroups: [gateway.modelgate.io]
  resources: [sandboximagebuilds/status, sandboximages/status]
  verbs: [get, update, patch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
# A ModelDeployment with a container source runs as a Deployment and a Service the manager owns. Activation and
# the autoscaler scale it, or a service source's scaleTargetRef, through the scale subresource; the autoscaler
# finds every gatewayd replica through its EndpointSlices.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [apps]
  resources: [deployments/scale]
  verbs: [get, update, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
# The materializer publishes the snapshot ConfigMaps (modelgate-snapshot and its chunks, whose count varies, so
# resourceNames cannot list them) and deletes chunks it no longer needs.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch, delete]
# Key reconcilers hash keys that users bring in a Secret (secretRef) and create the Secret of a minted key.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- end }}

{{/* gatewayd.rules: the snapshots it loads, the CRs its REST API writes, and the Secrets it sends upstream. */}}
{{- define "modelgate.gatewayd.rules" -}}
# The snapshot informer. RBAC cannot filter by label, so this is every ConfigMap of a served namespace; gatewayd
# itself only lists and watches those labelled gateway.modelgate.io/snapshot.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
# The /v1 REST API writes the same custom resources as kubectl and GitOps.
- apiGroups: [gateway.modelgate.io]
  resources: [groups, apikeys, endpoints, workspaceapikeys]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [gateway.modelgate.io]
  resources: [workspaces, teams]
  verbs: [get, list, watch]
# Model deployments behind a Service are called at the ready addresses of its EndpointSlices, with no kube-proxy hop.
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
# The model management routes create and change models (POST and PATCH /v1/models), and activate, deactivate,
# promote, retry and delete models and deployments; they create no deployment.
# patch also carries the wake that held calls and the wake routes ask for: the wake-requested-at annotation only.
- apiGroups: [gateway.modelgate.io]
  resources: [models]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [gateway.modelgate.io]
  resources: [modeldeployments]
  verbs: [get, list, watch, update, patch, delete]
# The chain management routes read chains and their deployments, promote a deployment into an environment
# (an update of the Chain), and delete chains.
- apiGroups: [gateway.modelgate.io]
  resources: [chains, chaindeployments]
  verbs: [get, list, watch, update, patch, delete]
# The logs route reads a deployment's Events.
- apiGroups: [""]
  resources: [events]
  verbs: [get, list, watch]
# The logs route also reads what a container source's pods print: the manager's Deployment md-<name> (for its
# selector and controller reference), its pods, and their logs.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get]
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
# Sandbox image pushes: the POST creates the repository's record and one build per push, the upload records the
# context's digest on the build's status, and DELETE removes the record.
- apiGroups: [gateway.modelgate.io]
  resources: [sandboximages]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [gateway.modelgate.io]
  resources: [sandboximagebuilds]
  verbs: [get, list, watch, create]
- apiGroups: [gateway.modelgate.io]
  resources: [sandboximagebuilds/status]
  verbs: [get, update]
# A push's docker_config goes into a Secret owned by its build. RBAC cannot limit creation by name; gatewayd still
# reads no Secret it was not granted.
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
{{- if eq .Values.gatewayd.secretAccess "namespace" }}
# secretAccess=namespace: every Secret of a served namespace (Endpoints created through the REST API).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch]
{{- else if .Values.gatewayd.upstreamSecretNames }}
# Upstream API keys and billing webhook secrets, by name only (gatewayd.upstreamSecretNames).
- apiGroups: [""]
  resources: [secrets]
  resourceNames: {{ toJson .Values.gatewayd.upstreamSecretNames }}
  verbs: [get]
{{- end }}
{{- end }}
