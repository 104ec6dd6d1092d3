// Command demo-model serves the demo model server of the local stack: GET /health, and POST /predict, which
// answers a toy sentiment for a JSON {"text": "..."} and echoes any other body back with its Content-Type. Point
// a ModelDeployment's source.url at it to try the model routes without a real model server. As a container image
// (make cluster) it is a container model: --start-delay makes it slow to start, and a predict body's delay_ms and
// fail_status make a call slow or failed (test/stack.NewDemoModel). On SIGTERM it stops taking connections and
// lets the calls in flight finish, up to --shutdown-grace.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelgate/modelgate/test/stack"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9998", "Address to serve the demo model on (GET /health, POST /predict).")
	name := flag.String("name", stack.ModelDeploymentName, "Deployment name the model puts in its answers.")
	startDelay := flag.Duration("start-delay", 0, "How long to wait before listening: a slow model server's start.")
	grace := flag.Duration("shutdown-grace", 30*time.Second, "How long calls in flight may take to finish after SIGTERM.")
	flag.Parse()

	srv := &http.Server{Addr: *addr, Handler: stack.NewDemoModel(*name), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *startDelay > 0 {
		log.Printf("Starting in %s", *startDelay)
		select {
		case <-time.After(*startDelay):
		case <-ctx.Done():
			return
		}
	}
	go func() {
		<-ctx.Done()
		log.Printf("Stopping: finishing the calls in flight")
		shutdown, cancel := context.WithTimeout(context.Background(), *grace)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("Serving the demo model %s on http://%s", *name, *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("Failed to serve: %v", err)
	}
}
