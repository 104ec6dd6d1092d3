// Package gateway holds the reconcilers of what gatewayd serves from the snapshot: Groups (place in the tree,
// effective models, cascading deletion through a finalizer), APIKeys and WorkspaceAPIKeys (derived or minted
// credentials, one KeyReconciler for both kinds), Endpoints (who routes a slug), and the materializer
// (SnapshotReconciler), which translates a whole workspace and publishes it in ConfigMaps. binding.go deletes a
// group or key whose bound group is gone.
package gateway
