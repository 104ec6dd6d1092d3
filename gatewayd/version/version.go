// Package version holds the version that the build stamps into modelgate's binaries:
// go build -ldflags "-X github.com/modelgate/modelgate/gatewayd/version.Version=v1.2.3".
package version

// Version is the stamped version; "dev" in a build that stamped none.
var Version = "dev"
