package hierarchy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// The cascading cases of testdata/cascading.json are shared with the dashboard's client-side check
// (gatewayd/dashboard/web/src/cascade.ts), so the two refuse the same writes in the same words.

type caseLimit struct {
	Type      string `json:"type"`
	Unit      string `json:"unit"`
	Threshold int64  `json:"threshold"`
}

type caseModel struct {
	Slug        string      `json:"slug"`
	RateLimits  []caseLimit `json:"rate_limits"`
	UsageLimits []caseLimit `json:"usage_limits"`
}

type caseGroup struct {
	ID     string      `json:"id"`
	Parent *string     `json:"parent"`
	Mode   string      `json:"mode"`
	Models []caseModel `json:"models"`
}

type caseWant struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (c caseGroup) group() *gatewayv1.Group {
	parent := ""
	if c.Parent != nil {
		parent = *c.Parent
	}
	var models []gatewayv1.ModelConfig
	for _, m := range c.Models {
		mc := gatewayv1.ModelConfig{Slug: m.Slug}
		for _, l := range m.RateLimits {
			mc.RateLimits = append(mc.RateLimits, gatewayv1.Limit{Type: gatewayv1.LimitType(l.Type), Unit: gatewayv1.LimitUnit(l.Unit), Threshold: l.Threshold})
		}
		for _, l := range m.UsageLimits {
			mc.UsageLimits = append(mc.UsageLimits, gatewayv1.Limit{Type: gatewayv1.LimitType(l.Type), Unit: gatewayv1.LimitUnit(l.Unit), Threshold: l.Threshold})
		}
		models = append(models, mc)
	}
	return grp(c.ID, parent, gatewayv1.LimitEnforcement(c.Mode), models...)
}

// apiPath writes a field path of the CRD in the REST API's terms, as the dashboard shows it.
func apiPath(p string) string {
	return strings.NewReplacer("spec.", "", "rateLimits", "rate_limits", "usageLimits", "usage_limits").Replace(p)
}

func TestCascadingCases(t *testing.T) {
	b, err := os.ReadFile("testdata/cascading.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Name   string      `json:"name"`
			Groups []caseGroup `json:"groups"`
			Write  caseGroup   `json:"write"`
			Want   []caseWant  `json:"want"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, tc := range file.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			var groups []*gatewayv1.Group
			for _, g := range tc.Groups {
				if g.ID != tc.Write.ID {
					groups = append(groups, g.group())
				}
			}
			w := tc.Write.group()
			errs := Validate(w, NewIndex(groups).With(w))
			got := make([]caseWant, 0, len(errs))
			for _, e := range errs {
				got = append(got, caseWant{Path: apiPath(e.Field), Message: e.Detail})
			}
			want := tc.Want
			if want == nil {
				want = []caseWant{}
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want)
			if string(gj) != string(wj) {
				t.Errorf("refusals differ\n got: %s\nwant: %s", gj, wj)
			}
		})
	}
}
