package v1alpha1

import "testing"

func TestDuplicateTargetName(t *testing.T) {
	tests := []struct {
		names []string
		want  int
	}{
		{[]string{""}, -1},
		{[]string{"", ""}, -1},
		{[]string{"a", "b", ""}, -1},
		{[]string{"target-0", ""}, -1},
		{[]string{"a", "a"}, 1},
		{[]string{"target-1", ""}, 1},
		{[]string{"", "target-0"}, 1},
		{[]string{"", "b", "target-2"}, -1},
		{[]string{"x", "", "", "target-2"}, 3},
	}
	for _, tc := range tests {
		if got := DuplicateTargetName(tc.names); got != tc.want {
			t.Errorf("DuplicateTargetName(%q) = %d, want %d", tc.names, got, tc.want)
		}
	}
}

func TestPricePattern(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "0.60": true, "12.123456": true, "999999999": true,
		"0.1234567": false, "-1": false, "01": false, "1.": false, ".5": false, "1e3": false, "1000000000": false} {
		if got := PricePattern.MatchString(s); got != want {
			t.Errorf("PricePattern(%q) = %v, want %v", s, got, want)
		}
	}
}
