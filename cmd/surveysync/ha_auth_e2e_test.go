package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/surveysync/surveysync/internal/testkit/zktest"
	"github.com/surveysync/surveysync/sim"
)

// TestHAZooKeeperAuth: two daemons with ha.username (and the password from
// SURVEYSYNC_HA__PASSWORD) elect one leader; the election's znodes carry
// the creator-only digest ACL, a client without the credentials can
// neither delete nor write them; the leader killed, the other leads;
// surveysync doctor reads the election with the credentials; the password
// is in no output.
func TestHAZooKeeperAuth(t *testing.T) {
	addr := zktest.Addr(t)
	const user, password = "surveysync-e2e", "zk-e2e-s3cret-password"
	t.Setenv("SURVEYSYNC_HA__PASSWORD", password) // the daemons inherit it
	e := newEmulator(t, sim.Options{Surveys: specs(1, 5, 3)})
	root := zktest.Root(t)
	ds := haPair(t, e, nil, addr, root, 3*time.Second, "sync:\n  poll_interval: 1h\n")
	for _, d := range ds {
		b, err := os.ReadFile(d.cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg := replaceOnce(string(b), "  instance: "+d.name+"\n", "  instance: "+d.name+"\n  username: "+user+"\n")
		if err := os.WriteFile(d.cfg, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		d.proc = startDaemon(t, d.cfg)
	}
	leader := leaderOf(t, ds, 30*time.Second)

	owner := zkClient(t, addr, user, password)
	var nodes []string
	for range 100 { // the follower's candidate may lag the leader's
		children, _, err := owner.Children(root)
		if err != nil {
			t.Fatalf("read %s with the credentials: %v", root, err)
		}
		if len(children) == 2 {
			nodes = []string{root, root + "/" + children[0], root + "/" + children[1]}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if nodes == nil {
		t.Fatal("not two candidates under the root")
	}
	want := zk.DigestACL(zk.PermAll, user, password)
	anon := zkClient(t, addr, "", "")
	for _, n := range nodes {
		acl, _, err := owner.GetACL(n)
		if err != nil || !slices.Equal(acl, want) {
			t.Errorf("ACL of %s = %+v, %v; want the digest ACL alone", n, acl, err)
		}
		if _, err := anon.Set(n, []byte("x"), -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("unauthenticated Set %s: %v", n, err)
		}
		if n != root {
			if err := anon.Delete(n, -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("unauthenticated Delete %s: %v", n, err)
			}
		}
	}

	out, _ := exec.Command(binPath, "doctor", "--config", ds[0].cfg).CombinedOutput()
	if !strings.Contains(string(out), "2 instance(s) campaigning") {
		t.Errorf("doctor does not read the election:\n%s", out)
	}
	if strings.Contains(string(out), password) {
		t.Error("the password is in doctor's output")
	}
	// doctor without the credentials says which to set.
	b, err := os.ReadFile(ds[0].cfg)
	if err != nil {
		t.Fatal(err)
	}
	anonCfg := filepath.Join(t.TempDir(), "anon.yaml")
	if err := os.WriteFile(anonCfg, []byte(strings.Replace(string(b), "  username: "+user+"\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := exec.Command(binPath, "doctor", "--config", anonCfg)
	doc.Env = cliEnv()
	out, _ = doc.CombinedOutput()
	if !strings.Contains(string(out), "not authenticated") || !strings.Contains(string(out), "ZooKeeper authentication") {
		t.Errorf("doctor without the credentials:\n%s", out)
	}

	leader.kill(t)
	var other *haDaemon
	for _, d := range ds {
		if d != leader {
			other = d
		}
	}
	if got := leaderOf(t, ds, 15*time.Second); got != other {
		t.Fatalf("%s leads after %s was killed", got.name, leader.name)
	}
	for _, d := range ds {
		if o := d.proc.output(); strings.Contains(o, password) {
			t.Errorf("%s: the password is in the output", d.name)
		} else if !strings.Contains(o, "auth=\"digest "+user+"\"") && !strings.Contains(o, "digest "+user) {
			t.Errorf("%s: the start line does not say which credentials:\n%s", d.name, tail(o, 20))
		}
	}
}

// zkClient is a ZooKeeper client authenticated as user (none when "").
func zkClient(t *testing.T, addr, user, password string) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogInfo(false))
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
	go func() {
		for range events { //nolint:revive // drained: the client blocks on a full channel
		}
	}()
	if user != "" {
		if err := conn.AddAuth("digest", []byte(user+":"+password)); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}
