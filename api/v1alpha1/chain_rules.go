package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateChainDeploymentSpec checks the rules of one ChainDeployment that its CRD's CEL also states (the
// entrypoint names a chainlet, chainlet names are unique), so that the webhook and the REST API refuse with the
// same field and rule whatever reached them first.
func ValidateChainDeploymentSpec(spec *ChainDeploymentSpec) field.ErrorList {
	var errs field.ErrorList
	chainlets := field.NewPath("spec", "chainlets")
	seen := make(map[string]bool, len(spec.Chainlets))
	for i, c := range spec.Chainlets {
		if seen[c.Name] {
			e := field.Duplicate(chainlets.Index(i).Child("name"), c.Name)
			e.Detail = "chainlet names must be unique within a ChainDeployment: they are the keys of MODELGATE_CHAINLET_URLS"
			errs = append(errs, e)
		}
		seen[c.Name] = true
	}
	if !seen[spec.Entrypoint] {
		errs = append(errs, field.Invalid(field.NewPath("spec", "entrypoint"), spec.Entrypoint,
			fmt.Sprintf("entrypoint must name one of spec.chainlets (%s)", chainletNames(spec))))
	}
	return errs
}

func chainletNames(spec *ChainDeploymentSpec) string {
	out := ""
	for i, c := range spec.Chainlets {
		if i > 0 {
			out += ", "
		}
		out += c.Name
	}
	if out == "" {
		return "none"
	}
	return out
}
