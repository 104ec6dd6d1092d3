// Package workspace holds the reconcilers of who is in a workspace: the Workspace in charge of its namespace,
// Teams and their default, the deprovisioning of PERSONAL keys of people no longer listed, and the migration of
// a WorkspaceAPIKey's creator into spec.createdBy.
package workspace
