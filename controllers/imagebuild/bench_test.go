package imagebuild

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// BenchmarkImport100MiB copies a 100 MiB image (four incompressible 25 MiB layers) between two registries on
// loopback sockets. docs/benchmarks.md records the figure:
//
//	go test ./controllers/imagebuild -run '^$' -bench Import100MiB -benchtime 5x
func BenchmarkImport100MiB(b *testing.B) {
	src, dst := newRegistry(b, "", ""), newRegistry(b, "", "")
	img, err := random.Image(25<<20, 4)
	if err != nil {
		b.Fatal(err)
	}
	ref, _ := name.ParseReference(src + "/bench/big:1")
	if err := remote.Write(ref, img); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100 << 20)
	b.ResetTimer()
	for i := range b.N {
		// A new repository each time, so no blob is already there.
		repo, _ := name.NewRepository(fmt.Sprintf("%s/bench/copy%d", dst, i))
		if _, err := Import(context.Background(), ref, repo, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuild50MiBContext builds FROM scratch with COPY of a 50 MiB context (fifty incompressible 1 MiB files)
// and pushes the result:
//
//	go test ./controllers/imagebuild -run '^$' -bench Build50MiB -benchtime 5x
func BenchmarkBuild50MiBContext(b *testing.B) {
	dst := newRegistry(b, "", "")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("Dockerfile")
	_, _ = w.Write([]byte("FROM scratch\nWORKDIR /app\nCOPY data/ ./data/\nCMD [\"/app/run\"]\n"))
	chunk := make([]byte, 1<<20)
	for i := range 50 {
		_, _ = rand.Read(chunk)
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("data/f%02d.bin", i), Method: zip.Store})
		_, _ = w.Write(chunk)
	}
	_ = zw.Close()
	raw := buf.Bytes()
	b.SetBytes(50 << 20)
	b.ResetTimer()
	for i := range b.N {
		zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			b.Fatal(err)
		}
		img, err := Build(context.Background(), zr, Options{TempDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		repo, _ := name.NewRepository(fmt.Sprintf("%s/bench/built%d", dst, i))
		if _, err := Push(context.Background(), img, repo, nil); err != nil {
			b.Fatal(err)
		}
	}
}
