package stack

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// startTimeout bounds a suite's start of the stack: the control plane, the manager and gatewayd.
const startTimeout = 4 * time.Minute

// SetTestLogger routes the stack's logs for a test run: they drown the test output, so they are dropped unless
// E2E_LOG is set, when a run needs explaining.
func SetTestLogger() {
	if os.Getenv("E2E_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
}

// RunSuite is the body of a suite's TestMain: it starts one stack with opts for every test of the package, runs
// setup on it (seeding what the suite needs), runs the tests and stops the stack, and returns the exit code. A
// stack that does not start or set up fails the run, with the suite's name.
func RunSuite(m *testing.M, suite string, opts Options, setup func(context.Context, *Stack) error) int {
	SetTestLogger()
	code, err := runSuite(m, opts, setup)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s suite: %v (KUBEBUILDER_ASSETS=%q)\n", suite, err, os.Getenv("KUBEBUILDER_ASSETS"))
		return 1
	}
	return code
}

func runSuite(m *testing.M, opts Options, setup func(context.Context, *Stack) error) (code int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		return 1, err
	}
	defer func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "failed to stop the stack: %v\n", err)
			code = 1
		}
	}()
	if setup != nil {
		if err := setup(ctx, s); err != nil {
			return 1, err
		}
	}
	return m.Run(), nil
}

// StartTest starts a stack for one test and stops it in a cleanup, so that what the test registers later (a
// process that watches the control plane) stops first. It fails the test when the stack does not start.
func StartTest(ctx context.Context, t testing.TB, opts Options) *Stack {
	t.Helper()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("failed to start the stack (KUBEBUILDER_ASSETS=%q): %v", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("failed to stop the stack: %v", err)
		}
	})
	return s
}
