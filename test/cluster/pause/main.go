// Command pause holds a pod's namespaces for the cluster's containerd (its sandbox_image): it sleeps until it is
// told to stop. No pause image can be pulled on the machines the cluster runs on, so the harness builds this one.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
