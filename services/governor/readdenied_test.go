package governor

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestARefusedRedeliveryReadNamesThePermission: a redelivery the
// sequence and the stored time judge differently has the governor read
// the message at the schedule's last sequence (resolveRestart): a direct
// get on TASKS, a message get on HEALTH. A deployment whose governor user
// lacked the grant got no reply, only the server's asynchronous -ERR: the
// read waited out the JetStream timeout, the message was tried again for
// ever, its task's later messages waiting behind it, and the log said
// "context deadline exceeded". The read ends at the refusal, its error
// names the permission, and an Error line names it and docs/security.md,
// once a minute however often the message is tried. As
// TestCommandCopyFromAClockAheadIsIgnored and
// TestBreakerCopyFromAClockAheadIsIgnored, under a user missing that one
// grant.
func TestARefusedRedeliveryReadNamesThePermission(t *testing.T) {
	for _, c := range []struct {
		name, denied string
		// copyOf sets up a redelivery the two rules judge differently, and
		// returns what judges it.
		copyOf func(t *testing.T, s *Service, js jetstream.JetStream) func() error
	}{
		{"TASKS", "DIRECT.GET." + streams.StreamTasks, commandCopy},
		{"HEALTH", "STREAM.MSG.GET." + streams.StreamHealth, breakerCopy},
	} {
		t.Run(c.name, func(t *testing.T) {
			denied := "$JS.API." + c.denied
			_, admin, gjs := natstest.StartDenying(t, "governor", denied, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			if got := jsutil.APISubject(gjs, c.denied); got != denied {
				t.Fatalf("the governor reads %s, not %s", got, denied)
			}
			logs := &syncBuffer{}
			s := runGovernorWith(t, Config{JS: gjs, Logger: slog.New(slog.NewTextHandler(logs, nil))})
			judge := c.copyOf(t, s, admin)
			want := "the governor service's NATS user needs " + denied + " (docs/security.md lists its subjects)"
			for try := 1; try <= 2; try++ {
				begun := time.Now()
				err := judge()
				if err == nil || !strings.Contains(err.Error(), "permissions violation: may not publish to "+denied) || !strings.Contains(err.Error(), want) {
					t.Fatalf("try %d, with %s refused: err %v; want one naming the refused subject and %q", try, denied, err, want)
				}
				if d := time.Since(begun); d > 3*time.Second {
					t.Errorf("try %d took %s: the read waited out the JetStream timeout instead of ending at the refusal", try, d)
				}
				var lines []string
				for l := range strings.SplitSeq(logs.String(), "\n") {
					if strings.Contains(l, "level=ERROR") && strings.Contains(l, "redelivery not judged") && strings.Contains(l, "needs="+denied) {
						lines = append(lines, l)
					}
				}
				if len(lines) != 1 {
					t.Fatalf("try %d: %d Error lines naming %s, want 1 (once a minute); the log:\n%s", try, len(lines), denied, logs.String())
				}
			}
		})
	}
}

// commandCopy applies pause-1 and resume-2, and returns the judging of
// pause-1 redelivered with a stored time after resume-2's
// (TestCommandCopyFromAClockAheadIsIgnored).
func commandCopy(t *testing.T, s *Service, js jetstream.JetStream) func() error {
	t.Helper()
	_, step := setUpCommandCopy(t, s, js)
	return func() error {
		_, err := s.applyCommand(t.Context(), step)
		return err
	}
}

// breakerCopy applies breaker.open and breaker.closed, and returns the
// judging of the open redelivered with a stored time after the close's
// (TestBreakerCopyFromAClockAheadIsIgnored).
func breakerCopy(t *testing.T, s *Service, js jetstream.JetStream) func() error {
	t.Helper()
	_, step := setUpBreakerCopy(t, s, js)
	spec, err := s.loadSpec(t.Context(), step.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	return func() error {
		_, err := s.decide(t.Context(), spec, step)
		return err
	}
}

// syncBuffer is a log's output, written by the service's goroutines and
// read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
