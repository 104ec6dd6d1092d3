package certs_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/test/kubetest"
)

var (
	cfg    *rest.Config
	k8s    client.Client
	scheme *runtime.Scheme
	ctx    context.Context
)

func TestCerts(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhook Certificates Suite")
}

var _ = BeforeSuite(func() {
	// Generous bounds for waiting on the rotator, which polls the mounted files with a backoff; the specs do not
	// measure how long anything takes.
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	// No CRDs: the certificate machinery only touches Secrets and webhook configurations.
	env := kubetest.StartSuite(kubetest.Options{})
	cfg, k8s, scheme = env.Config, env.Client, env.Scheme
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)
})
