package snapshot

import (
	"reflect"
	"testing"
)

// TestGroupEqualSeesEveryField changes each field of a Group, and of its Models and Limits, one at a time, and
// requires Equal to notice: a field added to the record but not to Equal would let gatewayd keep serving the
// old value of it.
func TestGroupEqualSeesEveryField(t *testing.T) {
	base := func() Group {
		return Group{ID: "g", ExternalEntityID: "e", DisplayName: "d", ParentID: "p", Mode: "CASCADING", Depth: 2,
			Models: []Model{{Slug: "s",
				RateLimits:  []Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 10, SourceGroup: "p"}},
				UsageLimits: []Limit{{Type: "TOKEN", Unit: "DAY", Threshold: 100, SourceGroup: "g"}}}}}
	}
	a, b := base(), base()
	if !a.Equal(&b) {
		t.Fatal("two equal groups compare unequal")
	}
	// mutate changes the leaf value v (a string or an int) in place.
	mutate := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		default:
			t.Fatalf("field of kind %s: teach this test to change it", v.Kind())
		}
	}
	// leaves calls f with a path and a setter for every leaf field reachable from v.
	var leaves func(path string, v reflect.Value, f func(string, reflect.Value))
	leaves = func(path string, v reflect.Value, f func(string, reflect.Value)) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				leaves(path+"."+v.Type().Field(i).Name, v.Field(i), f)
			}
		case reflect.Slice:
			for i := range v.Len() {
				leaves(path+"[]", v.Index(i), f)
			}
		default:
			f(path, v)
		}
	}
	count := 0
	leaves("Group", reflect.ValueOf(&a).Elem(), func(path string, _ reflect.Value) {
		count++
		changed := base()
		n := 0
		leaves("Group", reflect.ValueOf(&changed).Elem(), func(p string, v reflect.Value) {
			if n++; n == count {
				mutate(v)
			}
		})
		orig := base()
		if orig.Equal(&changed) {
			t.Errorf("changing %s leaves Equal true", path)
		}
	})
	changed := base()
	changed.Models = append(changed.Models, Model{Slug: "t"})
	if orig := base(); orig.Equal(&changed) {
		t.Error("an added model leaves Equal true")
	}
}
