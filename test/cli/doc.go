// Package cli tests the modelgate CLI (cmd/modelgate) as a person or a script runs it: the built binary, in its
// own process, against the whole local product (test/stack), one verb after another, refusals included. The
// package has no non-test code besides this comment; the suite needs KUBEBUILDER_ASSETS pointing at the envtest
// binaries.
package cli
