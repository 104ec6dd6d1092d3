package imagebuild

import (
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func emptyImage() v1.Image { return empty.Image }

// Result is what a push left in the workspace registry: the manifest (or index) digest and the size of
// everything it references.
type Result struct {
	Digest v1.Hash
	Size   int64
}

// Import copies src into repo by digest, every platform of an index included. The tag is the caller's to add
// once it has one (Tag), so an import interrupted here leaves no tag behind.
func Import(ctx context.Context, src name.Reference, repo name.Repository, pull, push []remote.Option) (Result, error) {
	pull = append(append([]remote.Option{}, pull...), remote.WithContext(ctx))
	push = append(append([]remote.Option{}, push...), remote.WithContext(ctx))
	desc, err := remote.Get(src, pull...)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return Result{}, refuse("The image %q cannot be read: %v.", src.String(), err)
	}
	dst := repo.Digest(desc.Digest.String())
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return Result{}, refuse("The image index %q cannot be read: %v.", src.String(), err)
		}
		if err := remote.WriteIndex(dst, idx, push...); err != nil {
			return Result{}, pushErr(ctx, err)
		}
		size, err := indexSize(idx)
		return Result{Digest: desc.Digest, Size: size}, err
	}
	img, err := desc.Image()
	if err != nil {
		return Result{}, refuse("The image %q cannot be read: %v.", src.String(), err)
	}
	if err := remote.Write(dst, img, push...); err != nil {
		return Result{}, pushErr(ctx, err)
	}
	size, err := imageSize(img)
	return Result{Digest: desc.Digest, Size: size}, err
}

// Push writes a built image into repo by digest.
func Push(ctx context.Context, img v1.Image, repo name.Repository, push []remote.Option) (Result, error) {
	dig, err := img.Digest()
	if err != nil {
		return Result{}, fmt.Errorf("failed to compute the image digest: %w", err)
	}
	if err := remote.Write(repo.Digest(dig.String()), img, append(append([]remote.Option{}, push...), remote.WithContext(ctx))...); err != nil {
		return Result{}, pushErr(ctx, err)
	}
	size, err := imageSize(img)
	return Result{Digest: dig, Size: size}, err
}

// Tag points tag at the manifest digest already in its repository.
func Tag(ctx context.Context, tag name.Tag, digest v1.Hash, push []remote.Option) error {
	opts := append(append([]remote.Option{}, push...), remote.WithContext(ctx))
	desc, err := remote.Get(tag.Context().Digest(digest.String()), opts...)
	if err != nil {
		return pushErr(ctx, err)
	}
	return remote.Tag(tag, desc, opts...)
}

func pushErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("failed to write to the workspace registry: %w", err)
}

func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	size := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return size, nil
}

func indexSize(idx v1.ImageIndex) (int64, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return 0, err
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return 0, err
	}
	size := int64(len(raw))
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsImage():
			img, err := idx.Image(d.Digest)
			if err != nil {
				return 0, err
			}
			s, err := imageSize(img)
			if err != nil {
				return 0, err
			}
			size += s
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return 0, err
			}
			s, err := indexSize(child)
			if err != nil {
				return 0, err
			}
			size += s
		default:
			size += d.Size
		}
	}
	return size, nil
}

// FetchContext downloads the uploaded context artifact (its single layer, a ZIP) into a temporary file and opens
// it. The caller closes and removes the file.
func FetchContext(ctx context.Context, ref name.Digest, opts []remote.Option, tempDir string) (*zip.Reader, *os.File, error) {
	img, err := remote.Image(ref, append(append([]remote.Option{}, opts...), remote.WithContext(ctx))...)
	if err != nil {
		return nil, nil, pushErr(ctx, err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		return nil, nil, refuse("The uploaded build context is not a single-layer artifact.")
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		return nil, nil, pushErr(ctx, err)
	}
	defer rc.Close()
	f, err := os.CreateTemp(tempDir, "context-*.zip")
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create the context file: %w", err)
	}
	size, err := io.Copy(f, rc)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, pushErr(ctx, err)
	}
	zr, err := zip.NewReader(f, size)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, refuse("The uploaded build context is not a ZIP archive: %v.", err)
	}
	return zr, f, nil
}

func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// Resolve describes what ref points at: its digest and size. A missing ref is (Result{}, false, nil).
func Resolve(ctx context.Context, ref name.Reference, opts []remote.Option) (Result, bool, error) {
	desc, err := remote.Get(ref, append(append([]remote.Option{}, opts...), remote.WithContext(ctx))...)
	if isNotFound(err) {
		return Result{}, false, nil
	}
	if err != nil {
		return Result{}, false, pushErr(ctx, err)
	}
	var size int64
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return Result{}, false, err
		}
		size, err = indexSize(idx)
		if err != nil {
			return Result{}, false, err
		}
	} else {
		img, err := desc.Image()
		if err != nil {
			return Result{}, false, err
		}
		if size, err = imageSize(img); err != nil {
			return Result{}, false, err
		}
	}
	return Result{Digest: desc.Digest, Size: size}, true, nil
}

// ContextLayer is the digest of the single layer of the context artifact at ref.
func ContextLayer(ctx context.Context, ref name.Digest, opts []remote.Option) (v1.Hash, error) {
	img, err := remote.Image(ref, append(append([]remote.Option{}, opts...), remote.WithContext(ctx))...)
	if err != nil {
		return v1.Hash{}, pushErr(ctx, err)
	}
	m, err := img.Manifest()
	if err != nil || len(m.Layers) != 1 {
		return v1.Hash{}, refuse("The uploaded build context is not a single-layer artifact.")
	}
	return m.Layers[0].Digest, nil
}
