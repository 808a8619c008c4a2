package ha

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/surveysync/surveysync/internal/testkit/zktest"
)

// connect opens a plain client on addr, authenticated as auth (none when
// unset), closed at the end of the test.
func connect(t *testing.T, addr string, auth Auth) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(discardLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	deadline := time.After(10 * time.Second)
	for ok := false; !ok; {
		select {
		case ev := <-events:
			ok = ev.State == zk.StateHasSession
		case <-deadline:
			t.Fatal("no ZooKeeper session")
		}
	}
	go func() { // drain: the client blocks on a full event channel
		for range events { //nolint:revive // only drained
		}
	}()
	if err := auth.authenticate(conn); err != nil {
		t.Fatal(err)
	}
	return conn
}

func aclOf(t *testing.T, conn *zk.Conn, p string) []zk.ACL {
	t.Helper()
	acl, _, err := conn.GetACL(p)
	if err != nil {
		t.Fatalf("GetACL %s: %v", p, err)
	}
	return acl
}

// With ha auth, every znode surveysync creates is creator-only: the root
// and the candidates carry the digest ACL alone, the parents it created
// also let anyone read and create (other accounts' roots) but nothing more.
// A client without credentials, or with others, can neither write nor
// delete them, nor create a candidate of its own; two daemons with the
// credentials still elect exactly one leader, and hand over when it
// leaves. Probe (doctor) reads the election with the credentials and says
// what is wrong without them.
func TestDigestAuthCreatorOnly(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t) + "/account"
	auth := Auth{Username: "surveysync", Password: "zk-s3cret-pw"}
	const timeout = 2 * time.Second
	w := &world{}
	a := startAuth(t, w, addr, root, "a", timeout, nil, auth)
	waitFor(t, 10*time.Second, "a leads", a.e.Leading)
	b := startAuth(t, w, addr, root, "b", timeout, nil, auth)
	owner := connect(t, addr, auth)
	waitFor(t, 5*time.Second, "two candidates", func() bool {
		ch, _, err := owner.Children(root)
		return err == nil && len(candidates(ch)) == 2
	})
	if ls := leaders(a, b); len(ls) != 1 || ls[0] != a {
		t.Fatalf("%d leaders, want a alone", len(ls))
	}

	want := zk.DigestACL(zk.PermAll, auth.Username, auth.Password)
	children, _, err := owner.Children(root)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{root}
	for _, ch := range candidates(children) {
		nodes = append(nodes, root+"/"+ch)
	}
	for _, n := range nodes {
		if got := aclOf(t, owner, n); !slices.Equal(got, want) {
			t.Errorf("ACL of %s = %+v, want the digest ACL alone %+v", n, got, want)
		}
	}
	parent := path.Dir(root)
	if got, wantP := aclOf(t, owner, parent), auth.parentACL(); !slices.Equal(got, wantP) {
		t.Errorf("ACL of the parent %s = %+v, want %+v", parent, got, wantP)
	}

	for _, who := range []struct {
		name string
		auth Auth
	}{{"no credentials", Auth{}}, {"other credentials", Auth{Username: "intruder", Password: "guess"}}} {
		c := connect(t, addr, who.auth)
		for _, n := range nodes {
			if _, err := c.Set(n, []byte("x"), -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s: Set %s: %v, want %v", who.name, n, err, zk.ErrNoAuth)
			}
			if _, err := c.SetACL(n, zk.WorldACL(zk.PermAll), -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s: SetACL %s: %v, want %v", who.name, n, err, zk.ErrNoAuth)
			}
			if _, _, err := c.Get(n); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s: Get %s: %v, want %v", who.name, n, err, zk.ErrNoAuth)
			}
		}
		for _, n := range nodes[1:] {
			if err := c.Delete(n, -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s: Delete %s: %v, want %v", who.name, n, err, zk.ErrNoAuth)
			}
		}
		if _, err := c.Create(root+"/_c_0-n_0000000000", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s: create a candidate: %v, want %v", who.name, err, zk.ErrNoAuth)
		}
		if err := c.Delete(root, -1); !errors.Is(err, zk.ErrNoAuth) && !errors.Is(err, zk.ErrNotEmpty) {
			t.Errorf("%s: Delete %s: %v", who.name, root, err)
		}
		if _, err := c.Set(parent, []byte("x"), -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s: Set the parent %s: %v, want %v", who.name, parent, err, zk.ErrNoAuth)
		}
		// Probe with these credentials says what to set.
		_, err := Probe(context.Background(), []string{addr}, root, who.auth, 5*time.Second)
		if !errors.Is(err, zk.ErrNoAuth) || !strings.Contains(err.Error(), "ha.password") {
			t.Errorf("%s: Probe: %v", who.name, err)
		}
	}
	el, err := Probe(context.Background(), []string{addr}, root, auth, 5*time.Second)
	if err != nil || !slices.Equal(el.Candidates, []string{"a", "b"}) {
		t.Errorf("Probe with the credentials = %+v, %v", el, err)
	}

	// A daemon without the credentials cannot campaign: it never leads
	// and says why.
	var logBuf syncBuffer
	reg := startLogged(t, w, addr, root, "c", timeout, Auth{}, &logBuf)
	time.Sleep(timeout)
	if reg.e.Leading() || !strings.Contains(logBuf.String(), "ha.username") {
		t.Errorf("a daemon without credentials: leading %v, log:\n%s", reg.e.Leading(), logBuf.String())
	}
	if strings.Contains(logBuf.String(), auth.Password) {
		t.Error("the password is in the log")
	}

	a.stop()
	waitFor(t, 5*time.Second, "b leads after a left", b.e.Leading)
	if m := w.most(); m > 1 {
		t.Fatalf("%d lead functions ran at once", m)
	}
}

// A root an older surveysync created open to every client gets the
// creator-only ACL when a daemon with credentials starts; a parent left
// open is named in a warning, not changed.
func TestDigestAuthRestrictsAnOpenRoot(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t) + "/account"
	old := connect(t, addr, Auth{})
	if err := ensurePath(old, root, Auth{}); err != nil { // as an older version did
		t.Fatal(err)
	}
	auth := Auth{Username: "surveysync", Password: "zk-s3cret-pw"}
	var logBuf syncBuffer
	w := &world{}
	a := startLogged(t, w, addr, root, "a", 2*time.Second, auth, &logBuf)
	waitFor(t, 10*time.Second, "a leads", a.e.Leading)
	owner := connect(t, addr, auth)
	if got, want := aclOf(t, owner, root), auth.acl(); !slices.Equal(got, want) {
		t.Errorf("ACL of the old root = %+v, want %+v", got, want)
	}
	if _, err := old.Set(root, []byte("x"), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("an unauthenticated client writes the old root: %v", err)
	}
	parent := path.Dir(root)
	if got := aclOf(t, owner, parent); !slices.Equal(got, zk.WorldACL(zk.PermAll)) {
		t.Errorf("the open parent's ACL was changed: %+v", got)
	}
	out := logBuf.String()
	if !strings.Contains(out, "now restricted") || !strings.Contains(out, parent) || strings.Contains(out, auth.Password) {
		t.Errorf("log:\n%s", out)
	}
}

func startLogged(t *testing.T, w *world, addr, root, name string, timeout time.Duration, auth Auth, buf *syncBuffer) *node {
	t.Helper()
	e, err := New(Options{Servers: []string{addr}, SessionTimeout: timeout, Root: root, Instance: name, Auth: auth,
		Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		if err := e.Run(ctx, w.lead(n)); err != nil {
			t.Errorf("%s: Run: %v", name, err)
		}
	}()
	t.Cleanup(n.stop)
	return n
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// ZooKeeper stopped past the session timeout and started again: the
// client reconnects (resuming its session or opening a new one) and
// presents the credentials again on the new connection, and a daemon leads
// again; the candidate znodes still carry the digest ACL alone.
func TestDigestAuthAfterZooKeeperRestart(t *testing.T) {
	srv := zktest.Start(t)
	root := zktest.Root(t)
	auth := Auth{Username: "surveysync", Password: "zk-s3cret-pw"}
	const timeout = 2 * time.Second
	w := &world{}
	a := startAuth(t, w, srv.Addr, root, "a", timeout, nil, auth)
	b := startAuth(t, w, srv.Addr, root, "b", timeout, nil, auth)
	waitFor(t, 10*time.Second, "one leads", func() bool { return len(leaders(a, b)) == 1 })
	srv.Stop(t)
	waitFor(t, timeout, "nobody leads", func() bool { return len(leaders(a, b)) == 0 && w.activeNow() == 0 })
	time.Sleep(timeout + time.Second) // past the sessions' expiry
	srv.Restart(t)
	waitFor(t, 20*time.Second, "one leads again", func() bool { return len(leaders(a, b)) == 1 })
	owner := connect(t, srv.Addr, auth)
	var children []string
	waitFor(t, 10*time.Second, "two candidates again", func() bool {
		ch, _, err := owner.Children(root)
		children = candidates(ch)
		return err == nil && len(children) == 2
	})
	for _, ch := range children {
		if got := aclOf(t, owner, root+"/"+ch); !slices.Equal(got, auth.acl()) {
			t.Errorf("ACL of %s after the restart = %+v", ch, got)
		}
	}
	if m := w.most(); m > 1 {
		t.Fatalf("%d lead functions ran at once", m)
	}
}
