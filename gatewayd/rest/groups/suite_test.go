package groups_test

import (
	"testing"

	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

func TestGroups(t *testing.T) { resttest.RunSpecs(t, "Group routes") }
