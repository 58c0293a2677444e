package governor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestDecodedRunsOutliveLaterDeliveries: events.Decode keeps a run event's
// data in the delivered message's memory instead of copying it, which is
// safe only because nats.go gives every message a buffer of its own. On a
// real server, run events of different sizes are fetched in one batch,
// followed by more deliveries on the same connection, and every event
// decoded on arrival still reads back as the run that was published.
func TestDecodedRunsOutliveLaterDeliveries(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	js := srv.JS
	ctx := t.Context()
	slot := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	const n = 50
	want := make([]string, n)
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		run := events.Run{
			DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1, Status: 200,
			Body: strings.Repeat(string(rune('a'+i%26)), 10+i*37), Fingerprint: fmt.Sprintf("sha256:%032d", i),
		}
		body, err := events.Marshal(events.OutcomeSucceeded.Type(), "/executor/test", id, &run, slot, "ev-"+id)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := run.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = string(enc)
		m := &nats.Msg{Subject: events.RunSubject(events.OutcomeSucceeded, id), Header: nats.Header{}, Data: body}
		m.Header.Set("Content-Type", events.ContentTypeStructured)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateConsumer(ctx, streams.StreamRuns, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatal(err)
	}
	decoded := make([]events.Event, 0, n)
	fetch := func(count int) {
		t.Helper()
		batch, err := cons.Fetch(count, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			e, err := events.Decode(m.Headers(), m.Data())
			if err != nil {
				t.Fatal(err)
			}
			decoded = append(decoded, e)
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
	fetch(n / 2)
	fetch(n - n/2) // the first half's events are held across these deliveries
	if len(decoded) != n {
		t.Fatalf("decoded %d events, want %d", len(decoded), n)
	}
	for i, e := range decoded {
		var got events.Run
		if err := events.DecodeRun(e, &got); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		enc, err := got.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(enc) != want[i] {
			t.Fatalf("event %d changed after later deliveries:\n%s\nwant\n%s", i, enc, want[i])
		}
	}
}
