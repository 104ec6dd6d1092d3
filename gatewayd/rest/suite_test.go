package rest_test

import (
	"testing"

	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

// The specs of this package cover the whole API: every route of the OpenAPI document, permissions, the management
// wrapper, bad input. Each resource's routes are specified beside their package, on the same fixture.
func TestREST(t *testing.T) { resttest.RunSpecs(t, "REST API Suite") }
