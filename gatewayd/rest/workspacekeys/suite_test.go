package workspacekeys_test

import (
	"testing"

	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

func TestWorkspaceKeys(t *testing.T) { resttest.RunSpecs(t, "Workspace key routes") }
