package deadletter_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/deadletter"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// warnCounter counts the lines logged at Warn or above whose message is msg.
type warnCounter struct {
	msg string
	n   *atomic.Int32
}

func (w warnCounter) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }

func (w warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == w.msg {
		w.n.Add(1)
	}
	return nil
}

func (w warnCounter) WithAttrs([]slog.Attr) slog.Handler { return w }

func (w warnCounter) WithGroup(string) slog.Handler { return w }

// failingAttempts is a JetStream whose flyball-attempts bucket answers
// every read with a timeout while failing is set, as a bucket electing a
// leader or on a restarting node does.
type failingAttempts struct {
	jetstream.JetStream
	failing atomic.Bool
}

func (j *failingAttempts) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := j.JetStream.KeyValue(ctx, bucket)
	if err != nil || bucket != streams.BucketAttempts {
		return kv, err
	}
	return &failingGet{KeyValue: kv, j: j}, nil
}

type failingGet struct {
	jetstream.KeyValue
	j *failingAttempts
}

func (f *failingGet) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if f.j.failing.Load() {
		return nil, nats.ErrTimeout
	}
	return f.KeyValue.Get(ctx, key)
}

// TestExhaustedDispatchWaitsForItsAttemptCount: while flyball-attempts
// cannot be read, an exhausted dispatch is not dead-lettered with 0
// attempts: the read is tried again, and the entry, written once the
// bucket answers, counts the attempts its record holds. Its reason does
// not claim a crash, which the service cannot know. (The bucket's reads
// fail through a wrapper: deleting and re-creating its stream left a
// moment with the bucket back and the record not yet written, in which
// a pass rightly counted 0.)
func TestExhaustedDispatchWaitsForItsAttemptCount(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	js := &failingAttempts{JetStream: srv.JS}
	kv, err := srv.JS.KeyValue(ctx, streams.BucketAttempts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "t1.1772442000000", []byte(`{"attempts":2}`)); err != nil {
		t.Fatal(err)
	}
	seq := publishDispatch(t, srv.JS, "t1")

	var retried atomic.Int32
	cfg := deadletter.Config{ReconcileInterval: 20 * time.Millisecond}
	cfg.JS = js
	cfg.Metrics = metrics.New()
	cfg.Logger = slog.New(warnCounter{msg: "exhausted dispatch not dead-lettered; retrying next interval", n: &retried})
	svc, err := deadletter.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	js.failing.Store(true) // flyball-attempts cannot be read
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	h := &harness{t: t, js: srv.JS, metrics: cfg.Metrics}

	exhaustWithoutAdvisory(t, srv.JS, 2)
	natstest.Eventually(t, 10*time.Second, "a dead letter, or a retry of the attempt read", func() bool {
		return h.entries("t1") > 0 || retried.Load() > 0
	})
	if h.entries("t1") > 0 {
		e := entryOf(t, srv.JS, "t1")
		t.Fatalf("dead-lettered with %d attempts while flyball-attempts could not be read, want no entry until it can", e.Attempts)
	}

	js.failing.Store(false) // back
	natstest.Eventually(t, 10*time.Second, "the dispatch is dead-lettered", func() bool { return h.entries("t1") == 1 })
	e := entryOf(t, js, "t1")
	if e.Attempts != 2 || e.Reason != events.DeadLetterMaxDeliveries {
		t.Fatalf("entry: reason %q, %d attempts; want %s, 2", e.Reason, e.Attempts, events.DeadLetterMaxDeliveries)
	}
	for _, ae := range e.Errors {
		if strings.Contains(ae.Error, "crash or timeout") {
			t.Fatalf("entry error %q claims a crash or timeout the service cannot know", ae.Error)
		}
	}
	dispatch, err := js.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	// The entry is stored before the dispatch is deleted.
	natstest.Eventually(t, 10*time.Second, "the dead-lettered dispatch deleted from DISPATCH", func() bool {
		_, err := dispatch.GetMsg(ctx, seq)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
}

// entryOf reads task's last dead-letter entry.
func entryOf(t *testing.T, js jetstream.JetStream, task string) events.DeadLetter {
	t.Helper()
	st, err := js.Stream(t.Context(), streams.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(t.Context(), events.DeadLetterSubject(task))
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.Decode(raw.Header, raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	var dl events.DeadLetter
	if err := events.DecodeData(e, &dl); err != nil {
		t.Fatal(err)
	}
	return dl
}
