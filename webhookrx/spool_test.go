package webhookrx

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openTestSpool(t *testing.T, dir string, segBytes int64, dedupe int) (*spool, []Event) {
	t.Helper()
	sp, seqs, err := openSpool(dir, segBytes, dedupe, testLogger(t))
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

// A torn record at the end of a segment (a crash mid-write, never
// acknowledged) is ignored; everything before it is replayed.
func TestSpoolIgnoresTornTail(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 1<<20, 100)
	sent := appendN(t, sp, 0, 3)
	seg := filepath.Join(dir, sp.active.name)
	sp.close()

	f, err := os.OpenFile(seg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0, 0, 1, 0, 0xde, 0xad, 0xbe, 0xef, '{', '"'}) // a record header claiming 256 bytes, then 2
	f.Close()

	sp, evs := openTestSpool(t, dir, 1<<20, 100)
	if len(evs) != 3 {
		t.Fatalf("replayed %d events, want 3", len(evs))
	}
	for i, ev := range evs {
		if ev.ID != sent[i].ID || ev.Seq != sent[i].Seq || !ev.ReceivedAt.Equal(sent[i].ReceivedAt) || string(ev.Body) != string(sent[i].Body) {
			t.Errorf("event %d replayed as %+v, want %+v", i, ev, sent[i])
		}
		if ev.Kind() != KindResponseReceived || ev.Parsed.ResponseID == "" {
			t.Errorf("event %d not re-parsed: %+v", i, ev.Parsed)
		}
	}
	// New events go to a new segment, never after the torn tail.
	more := appendN(t, sp, 3, 2)
	if more[0].Seq != sent[2].Seq+1 {
		t.Errorf("seq after replay = %d, want %d", more[0].Seq, sent[2].Seq+1)
	}
	sp.close()
	sp, evs = openTestSpool(t, dir, 1<<20, 100)
	defer sp.close()
	if len(evs) != 5 {
		t.Fatalf("second replay: %d events, want 5", len(evs))
	}
}

// A corrupt record in the middle of a segment ends that segment; later
// segments are still replayed.
func TestSpoolCorruptRecordEndsSegment(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 1, 100) // one batch per segment
	appendN(t, sp, 0, 3)
	if len(sp.segs) != 3 {
		t.Fatalf("%d segments, want 3", len(sp.segs))
	}
	second := filepath.Join(dir, sp.segs[1].name)
	sp.close()
	data, _ := os.ReadFile(second)
	data[len(data)-1] ^= 0xff
	os.WriteFile(second, data, 0o600)
	sp, evs := openTestSpool(t, dir, 1, 100)
	defer sp.close()
	if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 3 {
		t.Fatalf("replayed %+v, want seqs 1 and 3", evs)
	}
}

// Segments rotate at SegmentBytes and are deleted once all their events are
// done; the spool's counters follow.
func TestSpoolSegmentsRotateAndAreDeleted(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 1000, 100)
	evs := appendN(t, sp, 0, 20)
	nseg := len(walFiles(t, dir))
	if nseg < 4 {
		t.Fatalf("%d segment files for 20 events of ~300 bytes at 1000 bytes each", nseg)
	}
	if sp.events() != 20 || sp.bytes == 0 {
		t.Fatalf("events %d bytes %d", sp.events(), sp.bytes)
	}
	if !sp.oldest().Equal(evs[0].ReceivedAt) {
		t.Errorf("oldest = %v", sp.oldest())
	}
	// Done out of order: the first half except event 0.
	if err := sp.markDone(marks(evs[1:10])); err != nil {
		t.Fatal(err)
	}
	if !sp.oldest().Equal(evs[0].ReceivedAt) {
		t.Errorf("oldest after partial done = %v", sp.oldest())
	}
	if err := sp.markDone(marks(evs[:1])); err != nil {
		t.Fatal(err)
	}
	if !sp.oldest().Equal(evs[10].ReceivedAt) {
		t.Errorf("oldest = %v, want event 10's", sp.oldest())
	}
	if got := len(walFiles(t, dir)); got >= nseg {
		t.Errorf("segments %d → %d: done ones not deleted", nseg, got)
	}
	sp.close()
	sp, replay := openTestSpool(t, dir, 1000, 100)
	if len(replay) != 10 || replay[0].ID != evs[10].ID {
		t.Fatalf("replayed %d, first %v", len(replay), replay[0].Seq)
	}
	if err := sp.markDone(marks(replay)); err != nil {
		t.Fatal(err)
	}
	if got := walFiles(t, dir); len(got) != 0 {
		t.Errorf("segments left after all done: %v", got)
	}
	if sp.events() != 0 || sp.bytes != 0 || !sp.oldest().IsZero() {
		t.Errorf("empty spool: events %d bytes %d oldest %v", sp.events(), sp.bytes, sp.oldest())
	}
	sp.close()
	// Empty spool: the next sequence still comes after the last one.
	sp, _ = openTestSpool(t, dir, 1000, 100)
	defer sp.close()
	if sp.nextSeq != 21 {
		t.Errorf("nextSeq after restart with an empty spool = %d, want 21", sp.nextSeq)
	}
}

// done.log keeps the last DedupeIDs ids across restarts and is compacted.
func TestDoneIndexWindowAndCompaction(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 1<<20, 10)
	var all []Event
	for i := 0; i < 1200; i += 100 {
		evs := appendN(t, sp, i, 100)
		if err := sp.markDone(marks(evs)); err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
	}
	if sp.done.lines > 2*10+1024 {
		t.Errorf("done.log has %d lines: not compacted", sp.done.lines)
	}
	if sp.contains(all[0].ID) || !sp.contains(all[1199].ID) || !sp.contains(all[1190].ID) || sp.contains(all[1189].ID) {
		t.Error("window is not the last 10 ids")
	}
	sp.close()
	sp, _ = openTestSpool(t, dir, 1<<20, 10)
	defer sp.close()
	if !sp.contains(all[1199].ID) || !sp.contains(all[1190].ID) || sp.contains(all[1189].ID) {
		t.Error("window not restored from done.log")
	}
	data, _ := os.ReadFile(filepath.Join(dir, doneName))
	if n := strings.Count(string(data), "\n"); n != 10 {
		t.Errorf("done.log has %d lines after a restart, want 10", n)
	}
	if sp.nextSeq != 1201 {
		t.Errorf("nextSeq = %d", sp.nextSeq)
	}
}

// A torn last line of done.log is dropped at start.
func TestDoneIndexTornLine(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, doneName), []byte("1 abc\n2 def\n3 gh"), 0o600)
	sp, _ := openTestSpool(t, dir, 1<<20, 100)
	defer sp.close()
	if !sp.contains("abc") || !sp.contains("def") || sp.contains("gh") {
		t.Error("good lines lost or the torn one kept")
	}
	data, _ := os.ReadFile(filepath.Join(dir, doneName))
	if string(data) != "1 abc\n2 def\n" {
		t.Errorf("done.log after start = %q", data)
	}
}

func TestSpoolDuplicatesInOneBatchAndCaps(t *testing.T) {
	sp, _ := openTestSpool(t, t.TempDir(), 1<<20, 100)
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

// A crash after done.log was synced but before the segment was deleted:
// at start the events are recognised as done, not processed again, and the
// segment goes.
func TestSpoolDoneButNotDeletedAtCrash(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 1<<20, 100)
	evs := appendN(t, sp, 0, 3)
	if err := sp.done.add(marks(evs[:2])); err != nil { // done.log written, segment kept
		t.Fatal(err)
	}
	sp.close()
	sp, replay := openTestSpool(t, dir, 1<<20, 100)
	defer sp.close()
	if len(replay) != 1 || replay[0].ID != evs[2].ID {
		t.Fatalf("replayed %d events, want only the third", len(replay))
	}
	if sp.doneAtLoad[KindResponseReceived] != 2 {
		t.Errorf("doneAtLoad = %v", sp.doneAtLoad)
	}
	if err := sp.markDone(marks(replay)); err != nil {
		t.Fatal(err)
	}
	if got := walFiles(t, dir); len(got) != 0 {
		t.Errorf("segments left: %v", got)
	}
}

// A closed segment whose events are mostly done is rewritten with only the
// waiting ones: the done ones are gone from disk, even if the dedupe window
// has forgotten them, and the replay keeps order.
func TestSpoolCompactsMostlyDoneSegment(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 20*340, 1) // ~20 records a segment; a dedupe window of 1
	evs := appendN(t, sp, 0, 60)
	if len(sp.segs) < 3 {
		t.Fatalf("%d segments", len(sp.segs))
	}
	first := sp.segs[0]
	n := first.records
	// Everything done but events 3 and 5 of the first segment.
	var done []Event
	for i, ev := range evs {
		if i != 3 && i != 5 {
			done = append(done, ev)
		}
	}
	if err := sp.markDone(marks(done)); err != nil {
		t.Fatal(err)
	}
	if first.records != 2 || first.name != segmentName(evs[3].Seq) {
		t.Fatalf("first segment after compaction: %d records (was %d), name %s", first.records, n, first.name)
	}
	if files := walFiles(t, dir); len(files) != 1 || filepath.Base(files[0]) != first.name {
		t.Fatalf("segment files %v, want only %s", files, first.name)
	}
	sp.close()
	sp, replay := openTestSpool(t, dir, 20*340, 1)
	defer sp.close()
	if len(replay) != 2 || replay[0].ID != evs[3].ID || replay[1].ID != evs[5].ID {
		t.Fatalf("replayed %d events, want events 3 and 5", len(replay))
	}
	if sp.nextSeq != evs[59].Seq+1 {
		t.Errorf("nextSeq %d, want %d", sp.nextSeq, evs[59].Seq+1)
	}
}

// A compaction cut short after the rename leaves the old and the new file:
// the replay keeps each waiting event once.
func TestSpoolCompactionCrashLeavesBothFiles(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 1<<20, 100)
	evs := appendN(t, sp, 0, 20)
	old := filepath.Join(dir, sp.active.name)
	sp.close()
	data, _ := os.ReadFile(old)
	// The "new" file: records 10.. of the old one, named by event 10.
	var buf bytes.Buffer
	for _, ev := range evs[10:] {
		e := ev
		encodeRecord(&buf, &e)
	}
	os.WriteFile(filepath.Join(dir, segmentName(evs[10].Seq)), buf.Bytes(), 0o600)
	os.WriteFile(filepath.Join(dir, segmentName(evs[10].Seq)+".tmp"), data[:10], 0o600)
	sp, replay := openTestSpool(t, dir, 1<<20, 100)
	defer sp.close()
	if len(replay) != 20 {
		t.Fatalf("replayed %d, want 20 once each", len(replay))
	}
	if files := walFiles(t, dir); len(files) != 1 {
		t.Errorf("files after load: %v", files)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) != 0 {
		t.Errorf("stale tmp left: %v", tmp)
	}
}

// Two deliveries of one event in the same group commit, and the write
// fails: neither may hear 200 (nothing reached the disk; the service stops
// resending once one delivery is acknowledged).
func TestSpoolDuplicateInFailedBatchIsAnError(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 1<<20, 100)
	appendN(t, sp, 0, 1)
	sp.active.f.Close() // the next write fails
	body := []byte(responseBody(7))
	a := &Event{ID: bodyID(body), ReceivedAt: time.Unix(1700000000, 7).UTC(), Body: body}
	b := &Event{ID: a.ID, ReceivedAt: a.ReceivedAt, Body: body}
	res, err := sp.append([]*Event{a, b}, 1<<20, 1<<30)
	if err == nil {
		t.Fatal("append after the segment was closed succeeded")
	}
	if res[0] != resError || res[1] != resError {
		t.Fatalf("results %v, want both resError", res)
	}
}
