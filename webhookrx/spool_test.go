package webhookrx

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openTestSpool(t *testing.T, dir string, dedupe int) (*spool, []Event) {
	t.Helper()
	sp, seqs, err := openSpool(dir, dedupe, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]Event, len(seqs))
	for i, seq := range seqs {
		if evs[i], err = sp.read(seq); err != nil {
			t.Fatal(err)
		}
	}
	return sp, evs
}

func appendN(t *testing.T, sp *spool, from, n int) []Event {
	t.Helper()
	var out []Event
	for i := from; i < from+n; i++ {
		body := []byte(responseBody(i))
		ev := &Event{ID: bodyID(body), ReceivedAt: time.Unix(1700000000, int64(i)).UTC(), Body: body}
		res, err := sp.append([]*Event{ev}, 1<<20, 1<<30)
		if err != nil || res[0] != resAccepted {
			t.Fatalf("append %d: %v %v", i, res, err)
		}
		out = append(out, *ev)
	}
	return out
}

func marks(evs []Event) []doneMark {
	var m []doneMark
	for _, ev := range evs {
		m = append(m, doneMark{seq: ev.Seq, id: ev.ID})
	}
	return m
}

func seqs(evs []Event) []uint64 {
	var out []uint64
	for _, ev := range evs {
		out = append(out, ev.Seq)
	}
	return out
}

// keys counts the keys of a bucket of the spool's database.
func keys(t *testing.T, sp *spool, bucket []byte) int {
	t.Helper()
	n := 0
	if err := sp.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(bucket).Stats().KeyN; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// What was committed and not marked done is replayed, in order, with its
// body and time; done events are gone and stay in the dedupe window; the
// sequence goes on.
func TestSpoolReopenReplaysWaitingEvents(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 100)
	sent := appendN(t, sp, 0, 5)
	if err := sp.markDone(marks([]Event{sent[1], sent[3]})); err != nil {
		t.Fatal(err)
	}
	sp.close()
	sp, replay := openTestSpool(t, dir, 100)
	defer sp.close()
	want := []Event{sent[0], sent[2], sent[4]}
	if fmt.Sprint(seqs(replay)) != fmt.Sprint(seqs(want)) {
		t.Fatalf("replayed %v, want %v", seqs(replay), seqs(want))
	}
	for i, ev := range replay {
		if ev.ID != want[i].ID || !bytes.Equal(ev.Body, want[i].Body) || !ev.ReceivedAt.Equal(want[i].ReceivedAt) || ev.Kind() != KindResponseReceived {
			t.Errorf("event %d read back as %+v", i, ev)
		}
	}
	if !sp.contains(sent[1].ID) || !sp.contains(sent[0].ID) {
		t.Error("a done event or a waiting one is not recognised")
	}
	if sp.replayedKinds[KindResponseReceived] != 3 || sp.bytes != 3*eventSize(sent[0].ID, len(sent[0].Body)) {
		t.Errorf("replayed kinds %v, bytes %d", sp.replayedKinds, sp.bytes)
	}
	if next := appendN(t, sp, 10, 1); next[0].Seq != 6 {
		t.Errorf("sequence after a restart: %d, want 6", next[0].Seq)
	}
}

// With the spool empty, the sequence still goes on across a restart.
func TestSpoolSequenceSurvivesEmptySpool(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 100)
	if err := sp.markDone(marks(appendN(t, sp, 0, 3))); err != nil {
		t.Fatal(err)
	}
	if n := keys(t, sp, bucketEvents); n != 0 {
		t.Fatalf("%d events left after all were done", n)
	}
	sp.close()
	sp, replay := openTestSpool(t, dir, 100)
	defer sp.close()
	if len(replay) != 0 {
		t.Fatalf("replayed %d", len(replay))
	}
	if ev := appendN(t, sp, 5, 1); ev[0].Seq != 4 {
		t.Errorf("seq %d, want 4", ev[0].Seq)
	}
}

// The done window keeps the last DedupeIDs ids, on disk as in memory, and
// across restarts.
func TestDoneWindow(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 10)
	evs := appendN(t, sp, 0, 30)
	// Done out of sequence order: the window is the order they were done.
	order := slices.Clone(evs)
	slices.Reverse(order)
	for i := 0; i < len(order); i += 7 {
		if err := sp.markDone(marks(order[i:min(i+7, len(order))])); err != nil {
			t.Fatal(err)
		}
	}
	if n := keys(t, sp, bucketDone); n != 10 {
		t.Errorf("done bucket holds %d, want 10", n)
	}
	check := func(sp *spool, when string) {
		for i, ev := range order {
			if got, want := sp.done.has(ev.ID), i >= 20; got != want {
				t.Errorf("%s: done %d (seq %d) in the window: %v, want %v", when, i, ev.Seq, got, want)
			}
		}
	}
	check(sp, "before the restart")
	sp.close()
	sp, _ = openTestSpool(t, dir, 10)
	check(sp, "after the restart")
	sp.close()
	// A smaller window at the next start drops the oldest.
	sp, _ = openTestSpool(t, dir, 4)
	defer sp.close()
	if n := keys(t, sp, bucketDone); n != 4 || !sp.done.has(order[29].ID) || sp.done.has(order[25].ID) {
		t.Errorf("window of 4: %d kept", n)
	}
}

func TestSpoolDuplicatesInOneBatchAndCaps(t *testing.T) {
	sp, _ := openTestSpool(t, t.TempDir(), 100)
	defer sp.close()
	mk := func(i int) *Event {
		b := []byte(responseBody(i))
		return &Event{ID: bodyID(b), Body: b, ReceivedAt: time.Now()}
	}
	res, err := sp.append([]*Event{mk(1), mk(1), mk(2), mk(3)}, 2, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	want := []appendResult{resAccepted, resDuplicate, resAccepted, resFull}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Errorf("results %v, want %v", res, want)
	}
}

// Two deliveries of the same event land in one group commit and the commit
// fails: neither may hear 200 (nothing is durable; the service stops
// resending once one delivery is acknowledged).
func TestSpoolDuplicateInFailedBatchIsAnError(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 100)
	defer sp.close()
	appendN(t, sp, 0, 1)
	if err := sp.db.Close(); err != nil { // the next commit fails
		t.Fatal(err)
	}
	body := []byte(responseBody(7))
	a := &Event{ID: bodyID(body), ReceivedAt: time.Unix(1700000000, 7).UTC(), Body: body}
	b := &Event{ID: a.ID, ReceivedAt: a.ReceivedAt, Body: body}
	res, err := sp.append([]*Event{a, b}, 1<<20, 1<<30)
	if err == nil {
		t.Fatal("append after the database was closed succeeded")
	}
	if res[0] != resError || res[1] != resError {
		t.Fatalf("results %v, want both resError", res)
	}
	if sp.events() != 1 || sp.contains(a.ID) {
		t.Errorf("the failed event is counted as spooled")
	}
}

// Attempt counts and next attempt times are committed with the next done
// marks, reloaded at start, and dropped with their event.
func TestSpoolRetryStatePersists(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 100)
	evs := appendN(t, sp, 0, 3)
	next := time.Unix(1800000000, 5)
	sp.noteAttempts(evs[1].Seq, 3, next)
	sp.noteAttempts(evs[2].Seq, 1, next)
	if err := sp.markDone(marks(evs[2:])); err != nil { // evs[2] done: its count goes
		t.Fatal(err)
	}
	if n := keys(t, sp, bucketRetries); n != 1 {
		t.Errorf("retries bucket holds %d, want 1", n)
	}
	sp.close()
	sp, _ = openTestSpool(t, dir, 100)
	defer sp.close()
	if sp.attempts[evs[1].Seq] != 3 || !sp.retryAt[evs[1].Seq].Equal(next) || len(sp.attempts) != 1 {
		t.Errorf("after a restart: attempts %v, retry at %v", sp.attempts, sp.retryAt)
	}
}

// A spool of the former format (written by the previous release's code:
// testdata/legacy-spool, three segments with a torn record at the end of
// the last, done.log, retries.log) is imported at the first start and its
// files removed: the waiting events replay in order with their bodies, the
// done ids stay in the dedupe window, attempt counts are kept, and the
// sequence goes on.
func TestSpoolImportsFormerFormat(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/legacy-spool")); err != nil {
		t.Fatal(err)
	}
	done := []string{ // from done.log
		"80a8119744ab6455ee2df760e457294e4d010466c7cb640a0ed8326e6c17f841",
		"1017dc22f8c09432e08291bfc3384a0545fb023b619d3e684be5127bfb747e41",
		"f638e959814c0b5989905a9742145220ca29f63b11e07f803515fb5ccf8edc41",
		"7029937d2cb2e261d24885859c85a0ea8490ce4a2780748dcf855134eeb2169d",
	}
	sp, replay := openTestSpool(t, dir, 100)
	if left := legacyFiles(t, dir); len(left) != 0 {
		t.Errorf("former files left: %v", left)
	}
	if got := fmt.Sprint(seqs(replay)); got != "[5 6 7 8 9 10 11 12]" {
		t.Fatalf("replayed %s", got)
	}
	for _, ev := range replay {
		i := int(ev.Seq) - 1 // the fixture's event i has seq i+1
		if want := surveyResponseBody(1+i%3, i); string(ev.Body) != want || ev.ID != bodyID([]byte(want)) ||
			!ev.ReceivedAt.Equal(time.Unix(1700000000, int64(i))) || ev.Parsed.SurveyID != int64(1+i%3) {
			t.Errorf("event %d imported as %+v", ev.Seq, ev)
		}
	}
	for _, id := range done {
		if !sp.contains(id) {
			t.Errorf("done id %s… not in the window", id[:8])
		}
	}
	if sp.attempts[6] != 2 || len(sp.attempts) != 1 {
		t.Errorf("attempts %v, want event 6 at 2", sp.attempts)
	}
	sp.close()

	// A crash after the import committed, before the files went: the next
	// start only removes them, nothing is imported twice.
	if err := os.CopyFS(dir+"/again", os.DirFS("testdata/legacy-spool")); err != nil {
		t.Fatal(err)
	}
	for _, f := range legacyFiles(t, dir+"/again") {
		if err := os.Rename(f, filepath.Join(dir, filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	sp, replay = openTestSpool(t, dir, 100)
	defer sp.close()
	if left := legacyFiles(t, dir); len(left) != 0 {
		t.Errorf("former files left: %v", left)
	}
	if got := fmt.Sprint(seqs(replay)); got != "[5 6 7 8 9 10 11 12]" || keys(t, sp, bucketDone) != 4 {
		t.Fatalf("after a second start: replayed %s, %d done marks", got, keys(t, sp, bucketDone))
	}
	if ev := appendN(t, sp, 100, 1); ev[0].Seq != 13 {
		t.Errorf("seq after the import %d, want 13", ev[0].Seq)
	}
}

// A former spool written by encodeLegacyRecord (many events, some done,
// a duplicate left by a compaction cut short) imports in several
// transactions and keeps each waiting event once.
func TestSpoolImportsLargeFormerSpool(t *testing.T) {
	dir := t.TempDir()
	const n = legacyImportBatch + 100
	var seg bytes.Buffer
	var doneLog bytes.Buffer
	for i := range n {
		body := []byte(responseBody(i))
		ev := &Event{ID: bodyID(body), Seq: uint64(i + 1), ReceivedAt: time.Unix(1700000000, int64(i)).UTC(), Body: body}
		encodeLegacyRecord(&seg, ev)
		if i%2 == 0 {
			fmt.Fprintf(&doneLog, "%d %s\n", ev.Seq, ev.ID)
		}
	}
	whole := seg.Bytes()
	for name, data := range map[string][]byte{
		fmt.Sprintf("wal-%020d.log", 1): whole,
		fmt.Sprintf("wal-%020d.log", 2): whole[:len(whole)/2], // a compaction's leftover: duplicates
		legacyDoneName:                  doneLog.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sp, replay := openTestSpool(t, dir, 100)
	defer sp.close()
	if len(replay) != n/2 {
		t.Fatalf("replayed %d, want %d", len(replay), n/2)
	}
	for i := 1; i < len(replay); i++ {
		if replay[i].Seq <= replay[i-1].Seq {
			t.Fatalf("out of order at %d", i)
		}
	}
	if keys(t, sp, bucketDone) != 100 || sp.doneAtLoad[KindResponseReceived] == 0 {
		t.Errorf("done marks %d, already done %v", keys(t, sp, bucketDone), sp.doneAtLoad)
	}
}

// encodeLegacyRecord is the former spool's record encoder (for tests).
func encodeLegacyRecord(buf *bytes.Buffer, ev *Event) {
	plen := legacyPayloadFix + len(ev.ID) + len(ev.Body)
	var hdr [legacyRecHdrLen + legacyPayloadFix]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(plen))
	binary.BigEndian.PutUint64(hdr[8:], ev.Seq)
	binary.BigEndian.PutUint64(hdr[16:], uint64(ev.ReceivedAt.UnixNano()))
	binary.BigEndian.PutUint16(hdr[24:], uint16(len(ev.ID)))
	start := buf.Len()
	buf.Write(hdr[:])
	buf.WriteString(ev.ID)
	buf.Write(ev.Body)
	rec := buf.Bytes()[start:]
	binary.BigEndian.PutUint32(rec[4:], crc32.Checksum(rec[legacyRecHdrLen:], castagnoli))
}

// A file left mostly free (the spool filled, then drained) is rewritten
// smaller at start, and keeps what it held.
func TestSpoolCompactsMostlyFreeFile(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 100)
	pad := string(bytes.Repeat([]byte("x"), 4000))
	var evs []Event
	for i := range 600 {
		body := []byte(responseBody(i)[:len(responseBody(i))-1] + `,"pad":"` + pad + `"}`)
		ev := &Event{ID: bodyID(body), ReceivedAt: time.Unix(1700000000, int64(i)).UTC(), Body: body}
		if _, err := sp.append([]*Event{ev}, 1<<20, 1<<30); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, *ev)
	}
	if err := sp.markDone(marks(evs[:590])); err != nil {
		t.Fatal(err)
	}
	sp.close()
	path := filepath.Join(dir, dbName)
	before, _ := os.Stat(path)
	sp, _, err := openSpool(dir, 100, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.compact(1 << 20); err != nil {
		t.Fatal(err)
	}
	sp.close()
	after, _ := os.Stat(path)
	if after.Size()*2 > before.Size() {
		t.Errorf("file %d bytes before, %d after compaction", before.Size(), after.Size())
	}
	sp, replay := openTestSpool(t, dir, 100)
	defer sp.close()
	if fmt.Sprint(seqs(replay)) != fmt.Sprint(seqs(evs[590:])) || !sp.contains(evs[589].ID) {
		t.Fatalf("after compaction: replayed %v", seqs(replay))
	}
	if ev := appendN(t, sp, 1000, 1); ev[0].Seq != 601 {
		t.Errorf("seq after compaction %d, want 601", ev[0].Seq)
	}
	t.Logf("%d bytes before, %d after", before.Size(), after.Size())
}
