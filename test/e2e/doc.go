// Package e2e holds the end-to-end suites that drive the whole local product (test/stack: envtest with the
// CRDs, the manager with its controllers and TLS admission webhooks, gatewayd with the /v1 management API, and a
// demo upstream) over real HTTP only, the way a customer's service would: it creates groups and keys through the
// management API and proves each change through the inference route. The package has no non-test code besides
// this comment; the suites need KUBEBUILDER_ASSETS pointing at the envtest binaries.
package e2e
