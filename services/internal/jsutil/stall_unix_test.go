//go:build unix

package jsutil

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// stallChildURL, set, makes TestAStalledReaderReportsItsStall the reader
// it stops: it consumes the durable at that server.
const stallChildURL = "FLYBALL_TEST_STALL_NATS_URL"

// Timings of TestAStalledReaderReportsItsStall. The reader's pulls wait
// stallMaxWait (heartbeats every 500 ms, as MaxWait/4 is); the stop
// outlasts a pull by more than stallMargin, so the pull it interrupts
// comes back that late; a message lost with it is redelivered after
// stallAckWait, from its delivery in the stop.
const (
	stallMaxWait = 2 * time.Second
	stallFor     = 2*stallMaxWait - stallMaxWait/4
	stallAckWait = 5 * time.Second
)

// TestAStalledReaderReportsItsStall: a reader process stopped (SIGSTOP,
// docker pause, a paused VM) for longer than a pull finds, when it wakes,
// the messages delivered meanwhile in its socket and its pull's timers
// (the deadline, the missing heartbeats, nats.go's own) run out at the
// same instant. nats.go's fetch picks one at random; when a timer wins it
// drops the messages it received without a nak, and JetStream redelivers
// them after AckWait (30 s for DISPATCH). Nothing is lost, but before,
// nothing was logged or counted either: the pull ended like an idle one.
// The pull that comes back more than stallMargin past its deadline
// without its batch is now reported once, with a warning and
// flyball_pull_stalls_total. The reader is a child process, as only a
// stop of the whole process makes its timers and its socket's data ready
// at once; a proxy holding the server's bytes lets the timers fire on
// time, before the data arrives (the dead-leader case, logged as a failed
// pull).
func TestAStalledReaderReportsItsStall(t *testing.T) {
	if url := os.Getenv(stallChildURL); url != "" {
		stallChild(t, url)
		return
	}
	srv, url := natstest.StartListeningEmpty(t)
	js := srv.JS
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"work.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: stallAckWait})
	if err != nil {
		t.Fatal(err)
	}

	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAStalledReaderReportsItsStall$", "-test.count=1")
	child.Env = append(os.Environ(), stallChildURL+"="+url)
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var seen []string
	next := func(within time.Duration, what string, match func(string) bool) string {
		t.Helper()
		timeout := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the reader exited before %s; it wrote:\n%s", what, strings.Join(seen, "\n"))
				}
				seen = append(seen, l)
				if match(l) {
					return l
				}
			case <-timeout:
				t.Fatalf("%s not within %s; the reader wrote:\n%s", what, within, strings.Join(seen, "\n"))
			}
		}
	}

	next(10*time.Second, "the reader's start", func(l string) bool { return l == "ready" })
	natstest.Eventually(t, 10*time.Second, "the reader's pull waits", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting > 0
	})
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if _, err := js.Publish(ctx, "work.1", []byte("during the stall")); err != nil {
		t.Fatal(err)
	}
	// Delivered into the stopped reader's socket, unless its pull ran out
	// just before the stop (the next pull, after it, then takes it).
	delivered := false
	natstest.Eventually(t, stallFor/2, "the message is delivered or the pull ran out", func() bool {
		info, err := cons.Info(ctx)
		if err != nil {
			return false
		}
		delivered = info.NumAckPending == 1
		return delivered || info.NumWaiting == 0
	})
	<-time.After(time.Until(stopped.Add(stallFor))) // the stop itself, not a wait for a condition
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woke := time.Now()

	var handled, warned time.Time
	for handled.IsZero() || warned.IsZero() {
		l := next(stallAckWait+5*time.Second, "the stall's warning and the message", func(l string) bool {
			return strings.HasPrefix(l, "handled ") || strings.Contains(l, msgPullStalled)
		})
		if strings.HasPrefix(l, "handled ") {
			handled = time.Now()
			continue
		}
		warned = time.Now()
		var rec struct {
			Stalled time.Duration `json:"stalled"`
			AckWait time.Duration `json:"ack_wait"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("the warning %q: %v", l, err)
		}
		if rec.Stalled <= stallMargin || rec.Stalled > stallFor+time.Second {
			t.Errorf("the warning says stalled %s; want more than %s, about the stop's %s at most", rec.Stalled, stallMargin, stallFor)
		}
		if rec.AckWait != stallAckWait {
			t.Errorf("the warning says ack_wait %s, want the durable's %s", rec.AckWait, stallAckWait)
		}
	}
	t.Logf("stopped %s, the message delivered in the stop: %v; handled %s after SIGCONT (dropped with the pull, it comes back %s after its delivery); warned %s after SIGCONT",
		stallFor, delivered, handled.Sub(woke).Round(time.Millisecond), stallAckWait, warned.Sub(woke).Round(time.Millisecond))

	// Reported once, and not as a failed pull (a stopped pull can end on
	// its missing heartbeats).
	natstest.Eventually(t, 10*time.Second, "the reader acks the message", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream == 1
	})
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	var stalls, failures float64
	l := next(10*time.Second, "the reader's counts", func(l string) bool { return strings.HasPrefix(l, "counts ") })
	if _, err := fmt.Sscanf(l, "counts %g %g", &stalls, &failures); err != nil {
		t.Fatalf("%q: %v", l, err)
	}
	if stalls != 1 || failures != 0 {
		t.Fatalf("flyball_pull_stalls_total %v and flyball_pull_failures_total %v after one stall; want 1 and 0", stalls, failures)
	}
}

// stallChild is the reader TestAStalledReaderReportsItsStall stops. It
// writes "ready" once it consumes, "handled" for each message, its log
// as JSON, and, once its stdin closes, "counts <stalls> <failures>".
// Two workers: one message never completes a pull, so the stopped one
// always ends on a timer or on the server's expiry.
func stallChild(t *testing.T, url string) {
	out := &lockedWriter{w: os.Stdout}
	log := slog.New(slog.NewJSONHandler(out, nil))
	// The stop can overflow a pull's subscription with heartbeats: nats.go
	// reports the slow consumer here, not on stderr.
	nc, err := nats.Connect(url, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		log.Warn("nats: asynchronous error", "err", err)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stalls := prometheus.NewCounter(prometheus.CounterOpts{Name: "stalls"})
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "failures"})
	cc, err := ConsumeWorkers(t.Context(), js, "W", "w", log, Workers{N: 2, MaxWait: stallMaxWait, PullStalls: stalls, PullFailures: failures}, func(m jetstream.Msg) {
		out.line("handled " + string(m.Data()))
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	out.line("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	out.line(fmt.Sprintf("counts %g %g", testutil.ToFloat64(stalls), testutil.ToFloat64(failures)))
}

// lockedWriter writes the child's lines and its log records whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) line(s string) { _, _ = l.Write([]byte(s + "\n")) }
