// Command demo-upstream serves a fake OpenAI-compatible API (chat completions, completions, embeddings) with
// deterministic answers and usage, so the gateway can be tried and tested without a model server.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelgate/modelgate/test/upstream"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9999", "Address to serve the OpenAI-compatible API on (base URL http://ADDR/v1).")
	flag.Parse()

	// The fake listens on a loopback port of its own choosing; a reverse proxy puts it on the requested address.
	fake := upstream.New(upstream.Options{})
	defer fake.Close()
	target, err := url.Parse(fake.URL)
	if err != nil {
		log.Fatalf("Failed to parse the fake upstream's URL: %v", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // pass streamed chunks through as they come
	srv := &http.Server{Addr: *addr, Handler: proxy, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("Serving the demo upstream on http://%s/v1", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("Failed to serve: %v", err)
	}
}
