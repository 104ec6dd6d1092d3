package stack

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestWebhookPortTaken: Start starts again only when the manager stopped because its webhook server's port was
// taken, however the error reached it; any other failure is final.
func TestWebhookPortTaken(t *testing.T) {
	inUse := &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	waited := func(component string, err error) error {
		// As Start sees it: through poll's wrapping, joined with what Stop reported.
		return errors.Join(fmt.Errorf("while waiting for the webhook server to serve: %w", &stoppedError{component: component, err: err}), errors.New("stop"))
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the manager's port was taken", waited("manager", inUse), true},
		{"gatewayd's port was taken", waited("gatewayd", inUse), false},
		{"the manager failed otherwise", waited("manager", errors.New("no CRDs")), false},
		{"a port taken outside any component", fmt.Errorf("failed to listen: %w", inUse), false},
	} {
		if got := webhookPortTaken(tc.err); got != tc.want {
			t.Errorf("%s: webhookPortTaken = %v, want %v", tc.name, got, tc.want)
		}
	}
}
