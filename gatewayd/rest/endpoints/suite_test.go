package endpoints_test

import (
	"testing"

	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

func TestEndpoints(t *testing.T) { resttest.RunSpecs(t, "Endpoint routes") }
