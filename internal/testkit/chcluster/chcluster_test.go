package chcluster

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestClusterLayout: the cluster is 2 shards x 2 replicas, and every node's macros
// match its place in it.
func TestClusterLayout(t *testing.T) {
	c := FromEnv(t)
	if len(c.Addrs) != 4 {
		t.Fatalf("%d addresses, want 4: %v", len(c.Addrs), c.Addrs)
	}
	c.WaitAll(t)
	got := c.Query(t, 1, "SELECT shard_num, replica_num, port FROM system.clusters WHERE cluster = '"+c.Name+"' ORDER BY shard_num, replica_num FORMAT CSV")
	var want []string
	for n, a := range c.Addrs {
		want = append(want, strings.Join([]string{itoa(c.Shard(n + 1)), itoa(n%2 + 1), a[strings.LastIndexByte(a, ':')+1:]}, ","))
	}
	if got != strings.Join(want, "\n") {
		t.Errorf("system.clusters on node 1:\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	for n := 1; n <= 4; n++ {
		m := c.Query(t, n, "SELECT arrayStringConcat(groupArray(concat(macro, '=', substitution)), ' ') FROM (SELECT * FROM system.macros ORDER BY macro)")
		want := "cluster=" + c.Name + " replica=n" + itoa(n) + " shard=0" + itoa(c.Shard(n))
		if m != want {
			t.Errorf("node %d macros %q, want %q", n, m, want)
		}
	}
}

// TestClusterKillStart kills node 4 and starts it again: it answers again, and a
// row inserted into its shard meanwhile reaches it.
func TestClusterKillStart(t *testing.T) {
	c := FromEnv(t)
	c.WaitAll(t)
	db := "chcluster_test"
	c.Query(t, 1, "CREATE DATABASE IF NOT EXISTS "+db+" ON CLUSTER "+c.Name)
	c.Query(t, 1, "DROP TABLE IF EXISTS "+db+".t ON CLUSTER "+c.Name)
	t.Cleanup(func() { c.QueryErr(1, "DROP DATABASE IF EXISTS "+db+" ON CLUSTER "+c.Name) })
	// A fresh ZooKeeper path per run: a dropped table's path is gone, but
	// another run's might not be (a crash).
	path := "/clickhouse/tables/{shard}/" + db + "/t_" + itoa(int(time.Now().UnixNano()))
	c.Query(t, 1, "CREATE TABLE "+db+".t ON CLUSTER "+c.Name+" (k UInt64) ENGINE = ReplicatedMergeTree('"+path+"', '{replica}') ORDER BY k")

	c.Kill(t, 4)
	if _, err := c.QueryErr(4, "SELECT 1"); err == nil {
		t.Fatal("node 4 answers after Kill")
	}
	c.Query(t, 3, "INSERT INTO "+db+".t VALUES (1), (2), (3)")
	c.Start(t, 4)
	if got := c.Query(t, 4, "SELECT 1"); got != "1" {
		t.Fatalf("node 4 after Start: %q", got)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := c.QueryErr(4, "SELECT count() FROM "+db+".t")
		if err == nil && got == "3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 4 has %q rows (err %v) 60 s after restart, want 3", got, err)
		}
		time.Sleep(500 * time.Millisecond)
	}

	c.Stop(t, 4)
	c.Start(t, 4)
	c.WaitAll(t)
}

func itoa(i int) string { return strconv.Itoa(i) }
