package limits

import (
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// TestNamesAreTheAPIs: every limit type and unit of the API parses to one of this package's, and back to its name,
// so a kind added to the API without a counter here fails.
func TestNamesAreTheAPIs(t *testing.T) {
	if len(gatewayv1.LimitTypes) != int(numTypes) || len(gatewayv1.LimitUnits) != int(numUnits) {
		t.Fatalf("%d types and %d units here, the API has %d and %d", numTypes, numUnits, len(gatewayv1.LimitTypes), len(gatewayv1.LimitUnits))
	}
	for _, name := range gatewayv1.LimitTypes {
		typ, err := ParseType(string(name))
		if err != nil || typ.String() != string(name) {
			t.Errorf("ParseType(%s) = %v, %v; want the type named %s", name, typ, err, name)
		}
	}
	for _, name := range gatewayv1.LimitUnits {
		u, err := ParseUnit(string(name))
		if err != nil || u.String() != string(name) {
			t.Errorf("ParseUnit(%s) = %v, %v; want the unit named %s", name, u, err, name)
		}
	}
	if _, err := ParseType("HOUR"); err == nil {
		t.Error("ParseType(HOUR) parsed")
	}
	if _, err := ParseUnit("HOUR"); err == nil {
		t.Error("ParseUnit(HOUR) parsed")
	}
}
