// Command demo-model serves the demo model server of the local stack: GET /health, and POST /predict, which
// answers a toy sentiment for a JSON {"text": "..."} and echoes any other body back with its Content-Type. Point
// a ModelDeployment's source.url at it to try the model routes without a real model server.
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
	flag.Parse()

	srv := &http.Server{Addr: *addr, Handler: stack.NewDemoModel(*name), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("Serving the demo model %s on http://%s", *name, *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("Failed to serve: %v", err)
	}
}
