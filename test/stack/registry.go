package stack

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/registry"
)

// startRegistry serves a real OCI registry (go-containerregistry's pkg/registry) on addr: the workspace's image
// registry, where sandbox images and their uploaded build contexts go. Blobs are kept in DevDir/registry, so a
// large upload does not sit in the stack's memory.
func (s *Stack) startRegistry(addr string) error {
	dir := filepath.Join(s.devDir, "registry")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", dir, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s for the image registry: %w", addr, err)
	}
	srv := &http.Server{Handler: Registry(dir)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.failed <- fmt.Errorf("image registry stopped: %w", err)
		}
	}()
	s.RegistryHost = ln.Addr().String()
	s.stopRegistry = func() {
		_ = srv.Close()
		<-done
	}
	return nil
}

// Registry is a real OCI registry (go-containerregistry's pkg/registry) keeping its blobs in dir, quiet.
func Registry(dir string) http.Handler {
	return registry.New(registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)), registry.Logger(log.New(io.Discard, "", 0)))
}
