// Package sandboximage holds the SandboxImageBuild reconciler, which runs on the leader: imports and built-in
// builds through package imagebuild, the BuildKit backend (a Job, sandboximagebuild_buildkit.go) for what the
// built-in builder refuses, and the tag each result is given.
package sandboximage
