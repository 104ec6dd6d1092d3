package models_test

import (
	"testing"

	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

func TestModels(t *testing.T) { resttest.RunSpecs(t, "Model routes") }
