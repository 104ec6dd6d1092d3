package apikeys_test

import (
	"testing"

	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

func TestAPIKeys(t *testing.T) { resttest.RunSpecs(t, "API key routes") }
