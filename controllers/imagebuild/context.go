package imagebuild

import (
	"archive/zip"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// MaxEntries bounds the entries of a build context.
const MaxEntries = 100_000

// maxSymlinkTarget bounds the target of a symlink entry.
const maxSymlinkTarget = 4096

// Context is a checked build context: every entry's cleaned, relative path, and its ZIP entry.
type Context struct {
	files map[string]*zip.File
	names []string // sorted
}

// CheckContext refuses a ZIP that could write outside the image's target directories or exhaust the builder:
// more than MaxEntries entries, an absolute path (or a Windows drive or backslash), a path that climbs out with
// "..", and a symlink whose target is absolute or climbs out of the context.
func CheckContext(zr *zip.Reader) (*Context, error) {
	if len(zr.File) > MaxEntries {
		return nil, refuse("The build context has %d entries; at most %d are allowed.", len(zr.File), MaxEntries)
	}
	c := &Context{files: make(map[string]*zip.File, len(zr.File))}
	for _, f := range zr.File {
		n := f.Name
		if strings.Contains(n, `\`) || (len(n) >= 2 && n[1] == ':') {
			return nil, refuse("The build context entry %q uses a backslash or a drive letter; ZIP paths are relative and use '/'.", n)
		}
		if strings.HasPrefix(n, "/") {
			return nil, refuse("The build context entry %q is an absolute path; entries must be relative to the context.", n)
		}
		clean := path.Clean(n)
		if clean == ".." || strings.HasPrefix(clean, "../") {
			return nil, refuse("The build context entry %q climbs out of the context (zip-slip).", n)
		}
		if f.Mode()&fs.ModeSymlink != 0 {
			if f.UncompressedSize64 > maxSymlinkTarget {
				return nil, refuse("The build context symlink %q has a target longer than %d bytes.", n, maxSymlinkTarget)
			}
			target, err := readAll(f, maxSymlinkTarget)
			if err != nil {
				return nil, refuse("The build context symlink %q cannot be read: %v.", n, err)
			}
			if strings.HasPrefix(target, "/") {
				return nil, refuse("The build context symlink %q points at the absolute path %q; symlinks must stay inside the context.", n, target)
			}
			resolved := path.Clean(path.Join(path.Dir(clean), target))
			if resolved == ".." || strings.HasPrefix(resolved, "../") {
				return nil, refuse("The build context symlink %q points outside the context (%q).", n, target)
			}
		}
		if clean == "." {
			continue
		}
		c.files[clean] = f
		c.names = append(c.names, clean)
	}
	sort.Strings(c.names)
	return c, nil
}

func readAll(f *zip.File, limit int64) (string, error) {
	rc, err := f.Open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit))
	return string(b), err
}

// File returns the entry at the cleaned relative path p.
func (c *Context) File(p string) (*zip.File, bool) {
	f, ok := c.files[path.Clean(p)]
	return f, ok
}

// Match returns the regular files and symlinks that source pattern src selects: a file, every file below a
// directory (with its path relative to that directory), or the files matching a glob. Each result is
// (context path, path relative to the destination).
func (c *Context) Match(src string) ([][2]string, error) {
	src = strings.TrimPrefix(path.Clean("/"+src), "/")
	var out [][2]string
	add := func(name, rel string) {
		if f := c.files[name]; f != nil && !f.FileInfo().IsDir() {
			out = append(out, [2]string{name, rel})
		}
	}
	if src == "" || src == "." {
		for _, n := range c.names {
			add(n, n)
		}
		return out, nil
	}
	if strings.ContainsAny(src, "*?[") {
		for _, n := range c.names {
			if ok, err := path.Match(src, n); err != nil {
				return nil, err
			} else if ok {
				if f := c.files[n]; f.FileInfo().IsDir() {
					c.below(n, func(m, rel string) { add(m, path.Join(path.Base(n), rel)) })
				} else {
					add(n, path.Base(n))
				}
			}
		}
		return out, nil
	}
	if f, ok := c.files[src]; ok && !f.FileInfo().IsDir() {
		add(src, path.Base(src))
		return out, nil
	}
	c.below(src, add)
	return out, nil
}

// below calls fn for every entry under directory dir, with its path relative to dir.
func (c *Context) below(dir string, fn func(name, rel string)) {
	prefix := dir + "/"
	i := sort.SearchStrings(c.names, prefix)
	for ; i < len(c.names) && strings.HasPrefix(c.names[i], prefix); i++ {
		fn(c.names[i], strings.TrimPrefix(c.names[i], prefix))
	}
}
