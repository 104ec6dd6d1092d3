// Package models holds the reconcilers of the model platform: ModelDeployments (their server run as a
// Deployment and Service, a scaleTargetRef, or a probed url, and the status package deploystatus derives), Models
// and Chains (what each environment serves, environments.go, shared by both), and ChainDeployments (one
// ModelDeployment per chainlet).
package models
