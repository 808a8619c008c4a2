package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"golang.org/x/sync/errgroup"
)

// maxSinglePut is S3's limit for one PUT; bigger objects go up in parts.
const maxSinglePut = 5 << 30

// maxParts is S3's limit on the parts of one multipart upload.
const maxParts = 10_000

type s3Backend struct {
	client *s3.Client
	bucket string
	// sse and kmsKeyID are the server-side encryption of new objects
	// (ssetype, kmskeyid).
	sse      s3types.ServerSideEncryption
	kmsKeyID string
	// checksums is false when request_checksum_calculation=when_required:
	// multipart uploads then carry no CRC.
	checksums bool
	// singlePut is the largest object sent in one PutObject (tests lower it).
	singlePut int64
}

// openS3 opens an s3:// URL. The query parameters are those earlier
// versions accepted through gocloud.dev's s3blob (docs/files.md); static
// credentials come from the options.
func openS3(ctx context.Context, u *url.URL, o StoreOptions) (*s3Backend, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("blob: files url %q: s3:// needs a bucket name", u.Redacted())
	}
	b := &s3Backend{bucket: u.Host, singlePut: maxSinglePut}
	var (
		s3opts      []func(*s3.Options)
		loadOpts    []func(*awsconfig.LoadOptions) error
		endpoint    string
		roleARN     string
		rateLimit   int64
		pathStyle   bool
		requestCRCs = true
	)
	bad := func(k, v, want string) error {
		return fmt.Errorf("blob: files url %q: invalid %s=%q: want %s", u.Redacted(), k, v, want)
	}
	for k, vs := range u.Query() {
		v := vs[0]
		switch k {
		case "use_path_style", "s3ForcePathStyle", "hostname_immutable", "disable_https", "accelerate", "dualstack", "fips", "anonymous":
			on, err := strconv.ParseBool(v)
			if err != nil {
				return nil, bad(k, v, "true or false")
			}
			switch k {
			case "use_path_style", "s3ForcePathStyle", "hostname_immutable":
				pathStyle = pathStyle || on
			case "disable_https":
				s3opts = append(s3opts, func(o *s3.Options) { o.EndpointOptions.DisableHTTPS = on })
			case "accelerate":
				s3opts = append(s3opts, func(o *s3.Options) { o.UseAccelerate = on })
			case "dualstack":
				if on {
					loadOpts = append(loadOpts, awsconfig.WithUseDualStackEndpoint(aws.DualStackEndpointStateEnabled))
				}
			case "fips":
				if on {
					loadOpts = append(loadOpts, awsconfig.WithUseFIPSEndpoint(aws.FIPSEndpointStateEnabled))
				}
			case "anonymous":
				if on {
					loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(aws.AnonymousCredentials{}))
				}
			}
		case "region":
			loadOpts = append(loadOpts, awsconfig.WithRegion(v))
		case "endpoint":
			endpoint = v
		case "profile":
			loadOpts = append(loadOpts, awsconfig.WithSharedConfigProfile(v))
		case "role":
			if !strings.HasPrefix(v, "arn:") {
				return nil, bad(k, v, "an ARN (arn:…)")
			}
			roleARN = v
		case "rate_limiter_capacity":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 0 {
				return nil, bad(k, v, "a whole number")
			}
			rateLimit = n
		case "request_checksum_calculation":
			switch strings.ToLower(v) {
			case "when_supported":
				loadOpts = append(loadOpts, awsconfig.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenSupported))
			case "when_required":
				loadOpts = append(loadOpts, awsconfig.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired))
				requestCRCs = false
			default:
				return nil, bad(k, v, "when_supported or when_required")
			}
		case "response_checksum_validation":
			switch strings.ToLower(v) {
			case "when_supported":
				loadOpts = append(loadOpts, awsconfig.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenSupported))
			case "when_required":
				loadOpts = append(loadOpts, awsconfig.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired))
			default:
				return nil, bad(k, v, "when_supported or when_required")
			}
		case "ssetype":
			ok := false
			for _, t := range s3types.ServerSideEncryptionAes256.Values() {
				if strings.EqualFold(string(t), v) {
					b.sse, ok = t, true
				}
			}
			if !ok {
				return nil, bad(k, v, "AES256, aws:kms or aws:kms:dsse")
			}
		case "kmskeyid":
			b.kmsKeyID = v
		case "awssdk":
			// gocloud's SDK selector; v2 is the only one
		default:
			return nil, fmt.Errorf("blob: files url %q: unknown query parameter %q (docs/files.md lists them)", u.Redacted(), k)
		}
	}
	if roleARN != "" {
		base, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
		if err != nil {
			return nil, fmt.Errorf("blob: files url %q: load AWS config: %w", u.Redacted(), err)
		}
		if base.Region == "" {
			return nil, fmt.Errorf("blob: files url %q: role needs a region (region=… or AWS_REGION)", u.Redacted())
		}
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(stscreds.NewAssumeRoleProvider(sts.NewFromConfig(base), roleARN)))
	}
	// The retryer of earlier versions (gocloud's): the SDK's standard
	// retries without its client-side rate limit, unless asked for one.
	limiter := retry.RateLimiter(ratelimit.None)
	if rateLimit > 0 {
		limiter = ratelimit.NewTokenRateLimit(uint(rateLimit))
	}
	loadOpts = append(loadOpts, awsconfig.WithRetryer(func() aws.Retryer {
		return retry.NewStandard(func(so *retry.StandardOptions) { so.RateLimiter = limiter })
	}))
	cfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("blob: files url %q: load AWS config: %w", u.Redacted(), err)
	}
	switch {
	case o.AccessKey != "" && o.SecretKey != "":
		cfg.Credentials = aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, o.SessionToken))
	case o.AccessKey != "" || o.SecretKey != "":
		return nil, errors.New("blob: s3 credentials: access key and secret key must be set together")
	}
	if endpoint != "" {
		if eu, err := url.Parse(endpoint); err != nil || eu.Scheme == "" || eu.Host == "" {
			return nil, bad("endpoint", endpoint, "a URL such as http://127.0.0.1:7070")
		}
		s3opts = append(s3opts, func(o *s3.Options) { o.BaseEndpoint = aws.String(endpoint) })
	}
	if pathStyle {
		s3opts = append(s3opts, func(o *s3.Options) { o.UsePathStyle = true })
	}
	b.client = s3.NewFromConfig(cfg, s3opts...)
	b.checksums = requestCRCs && cfg.RequestChecksumCalculation != aws.RequestChecksumCalculationWhenRequired
	return b, nil
}

// isNotFound reports whether err is S3's answer for a missing object.
func isNotFound(err error) bool {
	var nk *s3types.NoSuchKey
	var nf *s3types.NotFound
	if errors.As(err, &nk) || errors.As(err, &nf) {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return true
		}
	}
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

func (b *s3Backend) wrap(key string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%s: %w", key, ErrNotExist)
	}
	return err
}

func (b *s3Backend) attributes(ctx context.Context, key string) (Attributes, error) {
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)})
	if err != nil {
		return Attributes{}, b.wrap(key, err)
	}
	md := make(map[string]string, len(out.Metadata))
	for k, v := range out.Metadata {
		// Values (and keys) are percent-encoded on write; a value that is
		// not (written by another tool) is kept as it came.
		if dk, err := url.PathUnescape(k); err == nil {
			k = dk
		}
		if dv, err := url.PathUnescape(v); err == nil {
			v = dv
		}
		md[strings.ToLower(k)] = v
	}
	return Attributes{
		Size:               aws.ToInt64(out.ContentLength),
		ContentType:        aws.ToString(out.ContentType),
		ContentDisposition: aws.ToString(out.ContentDisposition),
		Metadata:           md,
	}, nil
}

// escapedMetadata percent-encodes the values so that headers stay ASCII.
func escapedMetadata(md map[string]string) map[string]string {
	out := make(map[string]string, len(md))
	for k, v := range md {
		out[k] = url.PathEscape(v)
	}
	return out
}

// unsignedPayload skips the SigV4 payload hash: the SHA-256 is ours (in
// the metadata) and the SDK's CRC covers the body, so hashing every byte
// once more only costs CPU (UNSIGNED-PAYLOAD, as over HTTPS).
func unsignedPayload(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
}

// put sends objects up to singlePut bytes in one streamed PutObject, which
// S3 creates only when it completes, and bigger ones as a multipart
// upload, aborted on any error. Either way the body is read from the spool
// in place: no part buffers are held in memory.
func (b *s3Backend) put(ctx context.Context, key string, body io.ReaderAt, size int64, a Attributes, p parts) error {
	if size > b.singlePut {
		return b.putParts(ctx, key, body, size, a, p)
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(b.bucket),
		Key:           aws.String(key),
		Body:          io.NewSectionReader(body, 0, size),
		ContentLength: aws.Int64(size),
		Metadata:      escapedMetadata(a.Metadata),
	}
	if a.ContentType != "" {
		in.ContentType = aws.String(a.ContentType)
	}
	if a.ContentDisposition != "" {
		in.ContentDisposition = aws.String(a.ContentDisposition)
	}
	if b.sse != "" {
		in.ServerSideEncryption = b.sse
	}
	if b.kmsKeyID != "" {
		in.SSEKMSKeyId = aws.String(b.kmsKeyID)
	}
	_, err := b.client.PutObject(ctx, in, unsignedPayload)
	return err
}

func (b *s3Backend) putParts(ctx context.Context, key string, body io.ReaderAt, size int64, a Attributes, p parts) (err error) {
	partSize := max(p.size, (size+maxParts-1)/maxParts)
	in := &s3.CreateMultipartUploadInput{
		Bucket:   aws.String(b.bucket),
		Key:      aws.String(key),
		Metadata: escapedMetadata(a.Metadata),
	}
	if a.ContentType != "" {
		in.ContentType = aws.String(a.ContentType)
	}
	if a.ContentDisposition != "" {
		in.ContentDisposition = aws.String(a.ContentDisposition)
	}
	if b.sse != "" {
		in.ServerSideEncryption = b.sse
	}
	if b.kmsKeyID != "" {
		in.SSEKMSKeyId = aws.String(b.kmsKeyID)
	}
	if b.checksums {
		in.ChecksumAlgorithm = s3types.ChecksumAlgorithmCrc32
	}
	up, err := b.client.CreateMultipartUpload(ctx, in)
	if err != nil {
		return fmt.Errorf("start multipart upload: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		// Abort even when ctx is done, so the parts do not linger.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, aerr := b.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(b.bucket), Key: aws.String(key), UploadId: up.UploadId,
		}); aerr != nil {
			err = fmt.Errorf("%w (and abort multipart upload %s: %w)", err, aws.ToString(up.UploadId), aerr)
		}
	}()

	n := int((size + partSize - 1) / partSize)
	done := make([]s3types.CompletedPart, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.concurrency)
	for i := range n {
		g.Go(func() error {
			off := int64(i) * partSize
			length := min(partSize, size-off)
			pin := &s3.UploadPartInput{
				Bucket:        aws.String(b.bucket),
				Key:           aws.String(key),
				UploadId:      up.UploadId,
				PartNumber:    aws.Int32(int32(i + 1)),
				Body:          io.NewSectionReader(body, off, length),
				ContentLength: aws.Int64(length),
			}
			if b.checksums {
				pin.ChecksumAlgorithm = s3types.ChecksumAlgorithmCrc32
			}
			out, err := b.client.UploadPart(gctx, pin, unsignedPayload)
			if err != nil {
				return fmt.Errorf("upload part %d of %d: %w", i+1, n, err)
			}
			done[i] = s3types.CompletedPart{PartNumber: pin.PartNumber, ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if _, err := b.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(b.bucket), Key: aws.String(key), UploadId: up.UploadId,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: done},
	}); err != nil {
		return fmt.Errorf("complete multipart upload: %w", err)
	}
	return nil
}

func (b *s3Backend) open(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)})
	if err != nil {
		return nil, b.wrap(key, err)
	}
	return out.Body, nil
}

func (b *s3Backend) list(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	pg := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(prefix)})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			out = append(out, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size)})
		}
	}
	return out, nil
}

func (b *s3Backend) remove(ctx context.Context, key string) error {
	_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)})
	return b.wrap(key, err)
}

func (b *s3Backend) close() error { return nil }
