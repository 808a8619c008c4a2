package webhookrx

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// FuzzParseEvent: no body panics the parser, an accepted body names its
// event, and what the spool writes reads back identical (replay must see
// exactly what the handler accepted).
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"event_name": "response_received", "survey_id": 4574, "response_id": "DA453B67-791E-4D4D-9009-75B1ED8A33C1", "completed": true}`,
		`{"event_name": "survey_launched", "survey_id": "12", "launched_at": "2022-08-21T10:30:00.1234567Z"}`,
		`{"event_name": "survey_closed", "survey_id": 1, "closed_at": null}`,
		`{"event_name": "x"}`, `[]`, `null`, `{"event_name": 5}`, `{"event_name":"survey_ended","survey_id":1e3}`,
	} {
		f.Add([]byte(s), "msg_1")
	}
	f.Fuzz(func(t *testing.T, body []byte, id string) {
		ev, err := parseEvent(body)
		if err != nil {
			return
		}
		if ev.EventName == "" {
			t.Fatalf("accepted %q without an event name", body)
		}
		if !validID(id) {
			id = bodyID(body)
		}
		in := Event{ID: id, Seq: 7, ReceivedAt: time.Unix(0, 1763788800123456789).UTC(), Body: body, Parsed: ev, Name: ev.EventName}
		out, err := decodeEvent(7, encodeEvent(&in), true)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if diff := cmp.Diff(in, out); diff != "" {
			t.Fatalf("spool round trip changed the event (-in +out):\n%s", diff)
		}
	})
}

// FuzzDecodeEvent: a damaged value never panics the spool's load.
func FuzzDecodeEvent(f *testing.F) {
	f.Add(encodeEvent(&Event{ID: "msg_1", ReceivedAt: time.Unix(1, 0), Body: []byte(`{"event_name":"x"}`)}))
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeEvent(1, b, true)
	})
}

// FuzzDecodeLegacyRecord: a damaged segment of the former format never
// panics its import.
func FuzzDecodeLegacyRecord(f *testing.F) {
	var buf bytes.Buffer
	encodeLegacyRecord(&buf, &Event{ID: "msg_1", Seq: 1, ReceivedAt: time.Unix(1, 0), Body: []byte(`{"event_name":"x"}`)})
	f.Add(buf.Bytes())
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		for len(b) > 0 {
			_, n, err := decodeLegacyRecord(b)
			if err != nil {
				return
			}
			if n <= 0 || n > len(b) {
				t.Fatalf("decoded %d bytes of %d", n, len(b))
			}
			b = b[n:]
		}
	})
}
