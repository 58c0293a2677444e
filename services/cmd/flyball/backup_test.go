package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// TestBackupAndRestoreWithTheNatsCLI follows docs/operations.md, "Back up
// and restore", with the real nats CLI: a live backup of a running stack,
// the stack stopped, every stream restored into an empty server, and the
// stack started there. The task runs on from its restored schedule, with
// its spec, its counters and its run history.
func TestBackupAndRestoreWithTheNatsCLI(t *testing.T) {
	t.Parallel()
	natsCLI := natsCLIPath(t)
	var calls atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(target.Close)

	src, srcURL := natstest.StartListening(t)
	before := startTestStack(t, src)
	spec := fmt.Sprintf(`{"id":"kept","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, target.URL)
	if err := src.NC.Publish("flyball.task.created.kept", []byte(fmt.Sprintf(
		`{"specversion":"1.0","type":"io.flyball.task.created","source":"test","id":"c-kept","subject":"kept","datacontenttype":"application/json","data":%s}`, spec))); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 15*time.Second, "two runs before the backup", func() bool { return calls.Load() >= 2 })

	dir := filepath.Join(t.TempDir(), "flyball-backup")
	natsRun(t, natsCLI, srcURL, "backup", "account", dir, "--force")
	before.Stop()
	backedUp := schedule(t, src, "kept")

	dst, dstURL := natstest.StartListeningEmpty(t)
	natsRun(t, natsCLI, dstURL, "backup", "restore", "account", dir)
	// A dispatch an executor held when DISPATCH was snapshotted (about
	// one backup in four here: 1 s task, 250 ms lead) is restored as
	// delivered and not acked; without the reset it waits AckWait (60 s).
	natsRun(t, natsCLI, dstURL, "consumer", "reset", streams.StreamDispatch, streams.ConsumerExecutor, "-f")
	restored := schedule(t, dst, "kept")
	if restored.Runs < 2 || restored.Runs > backedUp.Runs {
		t.Fatalf("restored schedule has %d runs; the backup was taken with at least 2, the stack stopped with %d", restored.Runs, backedUp.Runs)
	}
	history := streamMsgs(t, dst, streams.StreamRuns)
	if history == 0 {
		t.Fatal("RUNS is empty after the restore")
	}

	startTestStack(t, dst) // ensures the streams: they match, nothing changes
	called := calls.Load()
	natstest.Eventually(t, 30*time.Second, "runs after the restore", func() bool {
		return calls.Load() >= called+2 && schedule(t, dst, "kept").Runs >= restored.Runs+2
	})
	if n := streamMsgs(t, dst, streams.StreamRuns); n <= history {
		t.Fatalf("RUNS holds %d messages after new runs, %d after the restore", n, history)
	}
}

// startTestStack starts every service on srv; the caller may Stop it
// earlier than the test's cleanup.
func startTestStack(t *testing.T, srv *natstest.Server) *stack.Stack {
	t.Helper()
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Guard: executor.Guard{AllowLoopback: true},
		APIAddr: "127.0.0.1:0", APITokens: []string{"test-token-0123456789"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	return st
}

func natsRun(t *testing.T, natsCLI, url string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, natsCLI, args...)
	cmd.Env = append(os.Environ(), "NATS_URL="+url)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats %v: %v\n%s", args, err, out)
	}
}

func schedule(t *testing.T, srv *natstest.Server, id string) gov.State {
	t.Helper()
	kv, err := srv.JS.KeyValue(context.Background(), streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("schedule of %s: %v", id, err)
	}
	var st gov.State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		t.Fatal(err)
	}
	if st.TaskID != id || st.NextRunAt.IsZero() {
		t.Fatalf("schedule of %s: %+v", id, st)
	}
	return st
}

func streamMsgs(t *testing.T, srv *natstest.Server, name string) uint64 {
	t.Helper()
	s, err := srv.JS.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
