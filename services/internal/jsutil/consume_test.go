package jsutil

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestConsumeResumesWhenItsDurableIsCreatedAgain: a durable deleted (by
// hand, or a restore) and created again by flyball provision is consumed
// again without a restart, as ConsumeWorkers' durables are. nats.go's
// Consume stops for good on "consumer deleted": the breaker and the
// dead-letter service then read nothing more until restarted, while
// FlyballPullFailing, which reads the failures counted here, stayed
// silent.
func TestConsumeResumesWhenItsDurableIsCreatedAgain(t *testing.T) {
	js := workStream(t, 30*time.Second)
	ctx := t.Context()
	log := matchLog{want: "consumer deleted", seen: make(chan struct{}, 1)}
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "pull_failures"})
	receive := consumeFirst(t, js, log, failures)

	cfg, err := js.Consumer(ctx, "W", "w")
	if err != nil {
		t.Fatal(err)
	}
	deleteDurable(t, js, log)
	// Created again at once, the durable can meet the deleted one's store
	// still going: nats-server answered 500 (10012, "rename …/obs/w/o.dat.tmp
	// …/obs/w/o.dat: no such file or directory") once in CI. The create is
	// idempotent, so it is tried again.
	natstest.Settle(t, 10*time.Second, "create the durable again", func(ctx context.Context) (jetstream.Consumer, error) {
		return js.CreateConsumer(ctx, "W", cfg.CachedInfo().Config)
	})
	if _, err := js.Publish(ctx, "work.1", []byte("after")); err != nil {
		t.Fatal(err)
	}
	receive("after")
	if n := testutil.ToFloat64(failures); n < 1 {
		t.Errorf("%v failures counted while the durable was gone, want at least 1 (FlyballPullFailing reads them)", n)
	}
}

// matchLog is a slog handler that reports on seen each logged err
// containing want.
type matchLog struct {
	want string
	seen chan struct{}
}

func (matchLog) Enabled(context.Context, slog.Level) bool { return true }
func (l matchLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" && strings.Contains(a.Value.String(), l.want) {
			select {
			case l.seen <- struct{}{}:
			default:
			}
		}
		return true
	})
	return nil
}
func (l matchLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l matchLog) WithGroup(string) slog.Handler      { return l }

// TestConsumeResumesAfterABadRequest: nats.go's Consume also ends for
// good when the server answers a pull 400 Bad Request, as it does while
// the durable has a priority policy the pulls do not name (a durable
// re-provisioned under a running service, by hand or by a newer
// version). Consume resumes after any error that ends it, counting each
// failed try, so once the durable is valid again messages are handled
// without a restart.
func TestConsumeResumesAfterABadRequest(t *testing.T) {
	js := workStream(t, 30*time.Second)
	ctx := t.Context()
	log := matchLog{want: "bad request", seen: make(chan struct{}, 1)}
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "pull_failures"})
	receive := consumeFirst(t, js, log, failures, jetstream.PullExpiry(time.Second))

	cons, err := js.Consumer(ctx, "W", "w")
	if err != nil {
		t.Fatal(err)
	}
	valid := cons.CachedInfo().Config
	pinned := valid
	pinned.PriorityPolicy, pinned.PriorityGroups, pinned.PinnedTTL = jetstream.PriorityPolicyPinned, []string{"g"}, time.Minute
	if _, err := js.UpdateConsumer(ctx, "W", pinned); err != nil {
		t.Fatal(err)
	}
	// The next pull, at the latest when the current one expires, names no
	// priority group: 400 Bad Request - Priority Group missing.
	select {
	case <-log.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("Consume logged no \"bad request\" within 10s of the priority policy's addition")
	}
	if _, err := js.UpdateConsumer(ctx, "W", valid); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "work.1", []byte("after")); err != nil {
		t.Fatal(err)
	}
	receive("after")
	if n := testutil.ToFloat64(failures); n < 1 {
		t.Errorf("%v failures counted while pulls were refused, want at least 1 (FlyballPullFailing reads them)", n)
	}
}

// TestConsumeDrainsWhileItsDurableIsGone: a service stopped while its
// durable is deleted stops at once (lifecycle waits on Closed).
func TestConsumeDrainsWhileItsDurableIsGone(t *testing.T) {
	js := workStream(t, 30*time.Second)
	ctx := t.Context()
	log := matchLog{want: "consumer deleted", seen: make(chan struct{}, 1)}
	handled := make(chan struct{}, 1)
	cc, err := Consume(ctx, js, "W", "w", slog.New(log), nil, func(m jetstream.Msg) {
		_ = m.DoubleAck(ctx) // stored before the test deletes the durable: a plain ack may not be, and the message comes again
		handled <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	// A message handled means the pull is at the server, so deleting the
	// durable ends it with "consumer deleted". Deleted before the pull
	// arrives, the pull finds no consumer and is only asked again (no
	// responders, then missed heartbeats): nothing to resume.
	if _, err := js.Publish(ctx, "work.1", []byte("first")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the first message was not handled within 10s")
	}
	deleteDurable(t, js, log)
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(5 * time.Second):
		t.Fatal("Closed not closed within 5s of Drain while the durable was gone")
	}
}

// deleteDurable deletes W's durable w and waits until Consume logs the
// deletion.
func deleteDurable(t *testing.T, js jetstream.JetStream, log matchLog) {
	t.Helper()
	if err := js.DeleteConsumer(t.Context(), "W", "w"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-log.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("Consume logged no \"consumer deleted\" within 10s of the durable's deletion")
	}
}

// consumeFirst consumes W/w with Consume, handles a first message
// "before", and returns a function that waits for the next one handled
// and checks it is want. Each message is double-acked: stored before a
// test deletes the durable (a plain ack may not be, and the message
// comes again).
func consumeFirst(t *testing.T, js jetstream.JetStream, log matchLog, failures prometheus.Counter, opts ...jetstream.PullConsumeOpt) func(want string) {
	t.Helper()
	ctx := t.Context()
	got := make(chan string, 8)
	cc, err := Consume(ctx, js, "W", "w", slog.New(log), failures, func(m jetstream.Msg) {
		_ = m.DoubleAck(ctx)
		got <- string(m.Data())
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	receive := func(want string) {
		t.Helper()
		select {
		case m := <-got:
			if m != want {
				t.Fatalf("handled %q, want %q", m, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q not handled within 10s", want)
		}
	}
	if _, err := js.Publish(ctx, "work.1", []byte("before")); err != nil {
		t.Fatal(err)
	}
	receive("before")
	return receive
}
