package blob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A file:// store keeps each object as a file under its root, named by its
// key, with a sidecar "<key>.attrs" JSON file for the content type,
// disposition and metadata — the layout of gocloud.dev's fileblob, which
// earlier versions used, so objects written by them are read as stored.
const (
	attrsExt = ".attrs"
	tmpExt   = ".tmp"
)

// fileAttrs is the sidecar's format (fileblob's field names).
type fileAttrs struct {
	CacheControl       string            `json:"user.cache_control"`
	ContentDisposition string            `json:"user.content_disposition"`
	ContentEncoding    string            `json:"user.content_encoding"`
	ContentLanguage    string            `json:"user.content_language"`
	ContentType        string            `json:"user.content_type"`
	Metadata           map[string]string `json:"user.metadata"`
	MD5                []byte            `json:"md5"`
}

type fileBackend struct {
	root string
}

// Modes of what a file:// store creates: objects and sidecars 0600,
// folders 0750 (the umask may only narrow them).
const (
	dirMode  = 0o750
	fileMode = 0o600
)

func openFile(u *url.URL) (*fileBackend, error) {
	if u.Path == "" || !filepath.IsAbs(filepath.FromSlash(u.Path)) {
		return nil, fmt.Errorf("blob: files url %q: file:// needs an absolute path (file:///data/files)", u.String())
	}
	for k := range u.Query() {
		switch k {
		case "create_dir", "no_tmp_dir": // accepted for compatibility: the folder is always created, temporary files always sit beside the objects
		default:
			return nil, fmt.Errorf("blob: files url %q: unknown query parameter %q", u.String(), k)
		}
	}
	root := filepath.Clean(filepath.FromSlash(u.Path))
	if err := os.MkdirAll(root, dirMode); err != nil {
		return nil, fmt.Errorf("blob: open %s: %w", u.String(), err)
	}
	return &fileBackend{root: root}, nil
}

func (b *fileBackend) path(key string) string {
	return filepath.Join(b.root, filepath.FromSlash(key))
}

func notExist(key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", key, ErrNotExist)
	}
	return err
}

func (b *fileBackend) attributes(ctx context.Context, key string) (Attributes, error) {
	p := b.path(key)
	info, err := os.Stat(p)
	if err != nil {
		return Attributes{}, notExist(key, err)
	}
	if info.IsDir() {
		return Attributes{}, fmt.Errorf("%s: %w", key, ErrNotExist)
	}
	a := Attributes{Size: info.Size(), ContentType: "application/octet-stream"}
	raw, err := os.ReadFile(p + attrsExt)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return a, nil
	case err != nil:
		return Attributes{}, err
	}
	var xa fileAttrs
	if err := json.Unmarshal(raw, &xa); err != nil {
		return Attributes{}, fmt.Errorf("read %s: %w", p+attrsExt, err)
	}
	a.ContentType, a.ContentDisposition, a.Metadata = xa.ContentType, xa.ContentDisposition, xa.Metadata
	return a, nil
}

// createTemp creates path.<nanoseconds>.tmp beside path (so that the
// final rename stays on one filesystem), mode 0600: respondents' uploads
// are personal data, readable by the daemon's user only.
func createTemp(path string) (*os.File, error) {
	for try := 0; ; try++ {
		name := path + "." + strconv.FormatInt(time.Now().UnixNano(), 16) + tmpExt
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
		if errors.Is(err, fs.ErrExist) && try < 1000 {
			continue
		}
		return f, err
	}
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// put writes a temporary file beside the object and renames it into place
// once complete; the sidecar is written (also by rename) first, so an
// object never appears without its attributes.
func (b *fileBackend) put(ctx context.Context, key string, body io.ReaderAt, size int64, a Attributes, _ parts) (err error) {
	p := b.path(key)
	if err := os.MkdirAll(filepath.Dir(p), dirMode); err != nil {
		return err
	}
	f, err := createTemp(p)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	n, err := io.Copy(f, ctxReader{ctx, io.NewSectionReader(body, 0, size)})
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("wrote %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	xa := fileAttrs{ContentType: a.ContentType, ContentDisposition: a.ContentDisposition}
	if len(a.Metadata) > 0 {
		xa.Metadata = a.Metadata
	}
	if err := writeAttrs(p, xa); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), p); err != nil {
		os.Remove(p + attrsExt)
		return err
	}
	return nil
}

func writeAttrs(path string, xa fileAttrs) (err error) {
	raw, err := json.Marshal(xa)
	if err != nil {
		return err
	}
	f, err := createTemp(path + attrsExt)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(append(raw, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path+attrsExt)
}

func (b *fileBackend) open(ctx context.Context, key string) (io.ReadCloser, error) {
	f, err := os.Open(b.path(key))
	if err != nil {
		return nil, notExist(key, err)
	}
	if info, err := f.Stat(); err != nil || info.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s: %w", key, ErrNotExist)
	}
	return f, nil
}

// list walks the folder that holds prefix; sidecars and temporary files
// are not objects.
func (b *fileBackend) list(ctx context.Context, prefix string) ([]Object, error) {
	dir := b.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir = b.path(prefix[:i])
	}
	var out []Object
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || strings.HasSuffix(p, attrsExt) || strings.HasSuffix(p, tmpExt) {
			return nil
		}
		rel, err := filepath.Rel(b.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return notExist(key, err)
		}
		out = append(out, Object{Key: key, Size: info.Size()})
		return nil
	})
	return out, err
}

func (b *fileBackend) remove(ctx context.Context, key string) error {
	p := b.path(key)
	if err := os.Remove(p); err != nil {
		return notExist(key, err)
	}
	if err := os.Remove(p + attrsExt); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (b *fileBackend) close() error { return nil }
