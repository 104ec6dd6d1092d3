package main

import (
	"strings"
	"testing"
	"time"
)

func TestValidateLeaderElection(t *testing.T) {
	for _, tc := range []struct {
		lease, renew, retry time.Duration
		refusal             string // empty: accepted
	}{
		{15 * time.Second, 10 * time.Second, 2 * time.Second, ""},
		{6 * time.Second, 4 * time.Second, time.Second, ""},
		{10 * time.Second, 10 * time.Second, 2 * time.Second, "--leader-election-lease-duration=10s must be longer than --leader-election-renew-deadline=10s"},
		{15 * time.Second, 2400 * time.Millisecond, 2 * time.Second, "--leader-election-renew-deadline=2.4s must be longer than 1.2 times --leader-election-retry-period=2s"},
		{15 * time.Second, 10 * time.Second, 0, "--leader-election-retry-period=0s must be positive"},
	} {
		err := flags{leaseDuration: tc.lease, renewDeadline: tc.renew, retryPeriod: tc.retry}.validateLeaderElection()
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%v/%v/%v refused: %v", tc.lease, tc.renew, tc.retry, err)
		case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%v/%v/%v: got %v, want %q", tc.lease, tc.renew, tc.retry, err, tc.refusal)
		}
	}
}
