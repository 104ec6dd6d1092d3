package chains_test

import (
	"testing"

	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

func TestChains(t *testing.T) { resttest.RunSpecs(t, "Chain routes") }
