// Package blobtest starts a real S3-compatible server for tests: the Versity
// S3 Gateway (github.com/versity/versitygw, Apache-2.0) with its posix
// backend in a temporary folder, on 127.0.0.1. Tests skip when the binary is
// not on PATH and SURVEYSYNC_TEST_VERSITYGW does not name it; .ci/run
// installs it (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0).
package blobtest

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Credentials of the test server's root account.
const (
	AccessKey = "surveysynctest"
	SecretKey = "surveysync-test-secret"
)

// Versity is a running (or stopped) gateway process.
type Versity struct {
	bin, dir, addr string
	cmd            *exec.Cmd
	done           chan struct{}
}

// Binary returns the versitygw executable, or "" when there is none.
func Binary() string {
	if p := os.Getenv("SURVEYSYNC_TEST_VERSITYGW"); p != "" {
		return p
	}
	p, _ := exec.LookPath("versitygw")
	return p
}

// Start starts a gateway on a free loopback port, or skips the test when it
// is not installed. It is stopped when the test ends.
func Start(t testing.TB) *Versity {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("versitygw not installed (PATH or SURVEYSYNC_TEST_VERSITYGW); .ci/run installs it")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	v := &Versity{bin: bin, dir: t.TempDir(), addr: addr}
	v.Restart(t)
	t.Cleanup(v.Stop)
	return v
}

// Restart starts the stopped gateway again on the same address and data.
func (v *Versity) Restart(t testing.TB) {
	t.Helper()
	// --keep-alive: without it the gateway closes every connection after one
	// request, and each S3 call pays a new TCP connection.
	cmd := exec.Command(v.bin, "--access", AccessKey, "--secret", SecretKey, "--port", v.addr, "--quiet", "--keep-alive", "posix", v.dir)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	v.cmd, v.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(v.done) // killed at stop: its exit status says nothing
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", v.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			v.Stop()
			t.Fatalf("versitygw did not listen on %s: %v", v.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the gateway (an outage); Restart brings it back.
func (v *Versity) Stop() {
	if v.cmd == nil {
		return
	}
	_ = v.cmd.Process.Kill() // it may have exited already; Wait (above) reaps it
	<-v.done
	v.cmd = nil
}

// Addr is host:port.
func (v *Versity) Addr() string { return v.addr }

// PID is the gateway's process id (0 when stopped).
func (v *Versity) PID() int {
	if v.cmd == nil {
		return 0
	}
	return v.cmd.Process.Pid
}

// URL is the files.url of bucket on this gateway.
func (v *Versity) URL(bucket string) string {
	return "s3://" + bucket + "?endpoint=http://" + v.addr + "&region=us-east-1&use_path_style=true"
}

// CreateBucket creates bucket.
func (v *Versity) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://" + v.addr),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
}
