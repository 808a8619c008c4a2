package blob

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/s3blob"
)

// Metadata keys written on every stored object (lower case: gocloud folds
// keys). Values are UTF-8; on S3 gocloud percent-encodes each value
// (url.PathEscape) so that headers stay ASCII, and decodes it on read.
const (
	MetaSHA256     = "sha256"      // lower-case hex SHA-256 of the object's bytes
	MetaSize       = "size"        // decimal byte count
	MetaFileName   = "filename"    // original file name, UTF-8
	MetaSurveyID   = "survey-id"   // decimal
	MetaResponseID = "response-id" // lower-case GUID
	MetaQuestionID = "question-id" // decimal
	MetaFileID     = "file-id"     // lower-case GUID
)

// StoreOptions says where objects go.
type StoreOptions struct {
	// URL of the bucket: file:///abs/dir (created when missing),
	// s3://bucket?region=…&endpoint=…&use_path_style=true, …. Empty means
	// DefaultURL(DataDir).
	URL string
	// DataDir is the daemon's data folder; the default store is its "files"
	// subfolder.
	DataDir string
	// AccessKey and SecretKey are static S3 credentials (secrets: never
	// logged). Both empty: the AWS default chain (AWS_ACCESS_KEY_ID /
	// AWS_SECRET_ACCESS_KEY, shared config, instance role).
	AccessKey, SecretKey string
	// SessionToken goes with temporary static credentials; usually empty.
	SessionToken string
}

// Store is an opened bucket plus the URL prefix that names its objects.
type Store struct {
	bucket *blob.Bucket
	base   string // scheme://host/path without query, no trailing slash
	name   string // bucket name (URL host)
}

func (s *Store) bucketName() string { return s.name }

// DefaultURL is the store used when files.url is empty: dataDir/files.
func DefaultURL(dataDir string) (string, error) {
	if dataDir == "" {
		dataDir = "."
	}
	abs, err := filepath.Abs(filepath.Join(dataDir, "files"))
	if err != nil {
		return "", fmt.Errorf("blob: default store under %q: %w", dataDir, err)
	}
	return "file://" + filepath.ToSlash(abs), nil
}

// OpenStore opens the bucket at o.URL. Supported schemes: file and s3 (with
// any S3-compatible server: endpoint, region and path style come from the
// URL). gs:// and azblob:// URLs are not compiled in (see docs/files.md).
func OpenStore(ctx context.Context, o StoreOptions) (*Store, error) {
	raw := o.URL
	if raw == "" {
		var err error
		if raw, err = DefaultURL(o.DataDir); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("blob: files url: %w", redactURLError(err))
	}
	var b *blob.Bucket
	switch u.Scheme {
	case fileblob.Scheme:
		b, err = openFile(ctx, u)
	case s3blob.Scheme:
		b, err = openS3(ctx, u, o)
	case "gs", "azblob":
		return nil, fmt.Errorf("blob: files url scheme %q is not compiled into this build (file and s3 are); see docs/files.md", u.Scheme)
	default:
		return nil, fmt.Errorf("blob: files url %q: unsupported scheme %q (want file:// or s3://)", u.Redacted(), u.Scheme)
	}
	if err != nil {
		return nil, err
	}
	base := u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")
	return &Store{bucket: b, base: base, name: u.Host}, nil
}

// NewStore wraps an already opened bucket; base is the URL prefix used in
// object_url (e.g. "s3://bucket").
func NewStore(b *blob.Bucket, base string) *Store {
	name := ""
	if u, err := url.Parse(base); err == nil {
		name = u.Host
	}
	return &Store{bucket: b, base: strings.TrimSuffix(base, "/"), name: name}
}

func openFile(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	if u.Path == "" || !filepath.IsAbs(filepath.FromSlash(u.Path)) {
		return nil, fmt.Errorf("blob: files url %q: file:// needs an absolute path (file:///data/files)", u.String())
	}
	q := u.Query()
	opts := &fileblob.Options{CreateDir: true, NoTempDir: true, DirFileMode: 0o750}
	for k := range q {
		switch k {
		case "create_dir", "no_tmp_dir":
		default:
			return nil, fmt.Errorf("blob: files url %q: unknown query parameter %q", u.String(), k)
		}
	}
	b, err := fileblob.OpenBucket(filepath.FromSlash(u.Path), opts)
	if err != nil {
		return nil, fmt.Errorf("blob: open %s: %w", u.String(), err)
	}
	return b, nil
}

// openS3 mirrors s3blob's URL opener (the same query parameters) and adds
// static credentials from the options.
func openS3(ctx context.Context, u *url.URL, o StoreOptions) (*blob.Bucket, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("blob: files url %q: s3:// needs a bucket name", u.Redacted())
	}
	q := u.Query()
	var s3opts []func(*s3.Options)
	var bopts s3blob.Options
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "use_path_style", "s3ForcePathStyle", "disable_https", "accelerate":
			on, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("blob: files url: invalid %s=%q: want true or false", k, v)
			}
			switch k {
			case "use_path_style", "s3ForcePathStyle":
				s3opts = append(s3opts, func(o *s3.Options) { o.UsePathStyle = on })
			case "disable_https":
				s3opts = append(s3opts, func(o *s3.Options) { o.EndpointOptions.DisableHTTPS = on })
			case "accelerate":
				s3opts = append(s3opts, func(o *s3.Options) { o.UseAccelerate = on })
			}
		case "ssetype":
			var ok bool
			for _, t := range s3types.ServerSideEncryptionAes256.Values() {
				if strings.EqualFold(string(t), v) {
					bopts.EncryptionType, ok = t, true
				}
			}
			if !ok {
				return nil, fmt.Errorf("blob: files url: invalid ssetype=%q", v)
			}
		case "kmskeyid":
			bopts.KMSEncryptionID = v
		default:
			continue
		}
		q.Del(k)
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("blob: files url %q: %w", u.Redacted(), err)
	}
	switch {
	case o.AccessKey != "" && o.SecretKey != "":
		cfg.Credentials = aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, o.SessionToken))
	case o.AccessKey != "" || o.SecretKey != "":
		return nil, errors.New("blob: s3 credentials: access key and secret key must be set together")
	}
	bopts.RequestChecksumCalculation = cfg.RequestChecksumCalculation
	client := s3.NewFromConfig(cfg, s3opts...)
	b, err := s3blob.OpenBucket(ctx, client, u.Host, &bopts)
	if err != nil {
		return nil, fmt.Errorf("blob: open s3 bucket %q: %w", u.Host, err)
	}
	return b, nil
}

func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return errors.New(ue.Err.Error())
	}
	return err
}

// Bucket is the opened bucket.
func (s *Store) Bucket() *blob.Bucket { return s.bucket }

// ObjectURL names key in the store, e.g. s3://bucket/surveys/1/… .
func (s *Store) ObjectURL(key string) string { return s.base + "/" + key }

// Close closes the bucket.
func (s *Store) Close() error { return s.bucket.Close() }

// contentDisposition builds an RFC 6266 attachment header carrying name: an
// ASCII fallback in filename= and the UTF-8 name in filename*= (RFC 5987
// percent-encoding), so HTTP headers stay ASCII.
func contentDisposition(name string) string {
	if name == "" {
		return ""
	}
	var fb strings.Builder
	for _, r := range name {
		switch {
		case r < 0x20 || r == 0x7f || r == '"' || r == '\\':
			fb.WriteByte('_')
		case r < utf8.RuneSelf:
			fb.WriteRune(r)
		default:
			fb.WriteByte('_')
		}
	}
	return mime.FormatMediaType("attachment", map[string]string{"filename": fb.String()}) +
		"; filename*=UTF-8''" + url.PathEscape(name)
}

// cleanFileName keeps the base name of what the service sent, valid UTF-8,
// without control characters.
func cleanFileName(name string) string {
	name = strings.ToValidUTF8(name, "\uFFFD")
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, name)
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return strings.TrimSpace(name)
}
