package kubetest

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// StartSuite is Start for a ginkgo suite's BeforeSuite: controller-runtime's logs go to the GinkgoWriter (shown
// only for a failed spec or with -v), a control plane that does not start fails the suite, and the control
// plane is stopped after the suite's AfterSuite and the cleanups registered after StartSuite have run.
func StartSuite(opts Options) *Env {
	ginkgo.GinkgoHelper()
	logf.SetLogger(zap.New(zap.WriteTo(ginkgo.GinkgoWriter), zap.UseDevMode(true)))
	env, err := Start(opts)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(env.Stop)
	return env
}

// RunManager is NewManager for a ginkgo suite, with the manager then running until ctx ends. Any error fails
// the suite, including one the manager returns while it runs.
func (e *Env) RunManager(ctx context.Context, setup ...func(ctrl.Manager) error) {
	ginkgo.GinkgoHelper()
	mgr, err := e.NewManager(setup...)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	go func() {
		defer ginkgo.GinkgoRecover()
		gomega.Expect(mgr.Start(ctx)).To(gomega.Succeed())
	}()
}
