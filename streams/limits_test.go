package streams

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestEnsureKeepsRaisedRetentionLimits is the reviewer's scenario: an
// operator raises RUNS's max_msgs_per_subject with `nats stream edit`,
// and a task's subject fills past the definition's 1,000. The next
// Ensure (a provision, a restart) keeps the raised limit and every
// message, and reports the kept difference.
func TestEnsureKeepsRaisedRetentionLimits(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)

	s := editStream(t, js, StreamRuns, func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 2000 })
	const n = 1500
	for i := range n {
		if _, err := js.PublishAsync("flyball.run.succeeded.t1", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishes not acked")
	}

	var report []string
	mustEnsureReport(t, js, &report)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Msgs; got != n || info.Config.MaxMsgsPerSubject != 2000 {
		t.Errorf("RUNS now holds %d of %d messages (max_msgs_per_subject %d), want all of them under 2000",
			got, n, info.Config.MaxMsgsPerSubject)
	}
	want := []string{"RUNS: max_msgs_per_subject 2000 kept (flyball's default is 1000)"}
	if !slices.Equal(report, want) {
		t.Errorf("report %q, want %q", report, want)
	}
}

// TestEnsureKeepsLoweredMaxAge: an operator shortens TASKS's max_age to
// free storage (the FlyballJetStreamStorageHigh runbook); Ensure keeps
// it, reports it, and repairs nothing else of the stream.
func TestEnsureKeepsLoweredMaxAge(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)

	s := editStream(t, js, StreamTasks, func(c *jetstream.StreamConfig) { c.MaxAge = 72 * time.Hour })
	var report []string
	mustEnsureReport(t, js, &report)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Config.MaxAge; got != 72*time.Hour {
		t.Errorf("TASKS max_age %v after Ensure, want the operator's 72h", got)
	}
	want := []string{"TASKS: max_age 72h kept (flyball's default is 8760h)"}
	if !slices.Equal(report, want) {
		t.Errorf("report %q, want %q", report, want)
	}
	// Nothing to report a second time round but the same kept limit.
	report = nil
	mustEnsureReport(t, js, &report)
	if !slices.Equal(report, want) {
		t.Errorf("second report %q, want %q", report, want)
	}
}

// TestEnsureRepairsSemanticLimits: DISPATCH's one message per subject is
// what makes a task's run pending at most once; raised by hand, Ensure
// sets it back and says so. A KV bucket's history and TTL are flyball's
// too.
func TestEnsureRepairsSemanticLimits(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)

	for name, edit := range map[string]func(*jetstream.StreamConfig){
		StreamDispatch:         func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 5 },
		"KV_" + BucketAttempts: func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour },
	} {
		editStream(t, js, name, edit)
	}
	var report []string
	mustEnsureReport(t, js, &report)
	d, err := js.Stream(ctx, StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.CachedInfo().Config.MaxMsgsPerSubject; got != 1 {
		t.Errorf("DISPATCH max_msgs_per_subject %d after Ensure, want 1", got)
	}
	if err := Check(&d.CachedInfo().Config); err != nil {
		t.Errorf("Check after Ensure: %v", err)
	}
	a, err := js.Stream(ctx, "KV_"+BucketAttempts)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.CachedInfo().Config.MaxAge; got != 72*time.Hour {
		t.Errorf("KV_%s max_age %v after Ensure, want 72h", BucketAttempts, got)
	}
	want := []string{
		"DISPATCH: max_msgs_per_subject 5 set back to 1 (flyball relies on its definition's)",
		"KV_flyball-attempts: max_age 1h set back to 72h (flyball relies on its definition's)",
	}
	if !slices.Equal(report, want) {
		t.Errorf("report %q, want %q", report, want)
	}
}

func mustEnsureReport(t *testing.T, js jetstream.JetStream, report *[]string) {
	t.Helper()
	if err := Ensure(testCtx(t), js, WithReport(func(d Difference) { *report = append(*report, d.String()) })); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
}

// editStream changes stream name's config with edit, as an operator's
// `nats stream edit` would, and returns the stream.
func editStream(t *testing.T, js jetstream.JetStream, name string, edit func(*jetstream.StreamConfig)) jetstream.Stream {
	t.Helper()
	ctx := testCtx(t)
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	edit(&cfg)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("UpdateStream %s: %v", name, err)
	}
	return s
}

// TestEnsureKeepsWindowWithinKeptMaxAge: an operator shortens
// DEADLETTER's max_age below its definition's 24h duplicate window
// (`nats stream edit --max-age 12h --dupe-window 12h`). Ensure keeps the
// max age and so cannot write the definition's window back (nats-server
// refuses a window longer than max_age, error 10052): it keeps the
// window at the max age, reports it, and updates the streams after it.
func TestEnsureKeepsWindowWithinKeptMaxAge(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)

	s := editStream(t, js, StreamDeadLetter, func(c *jetstream.StreamConfig) {
		c.MaxAge = 12 * time.Hour
		c.Duplicates = 12 * time.Hour
	})
	// A later stream drifted too: the Ensure must get past DEADLETTER.
	editStream(t, js, StreamTasks, func(c *jetstream.StreamConfig) { c.Duplicates = 30 * time.Second })
	// A live window below the kept max age is kept as it is.
	editStream(t, js, StreamHealth, func(c *jetstream.StreamConfig) {
		c.MaxAge = time.Minute
		c.Duplicates = 30 * time.Second
	})

	var report []string
	mustEnsureReport(t, js, &report)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 12*time.Hour || info.Config.Duplicates != 12*time.Hour {
		t.Errorf("DEADLETTER max_age %v duplicate_window %v, want 12h 12h", info.Config.MaxAge, info.Config.Duplicates)
	}
	h, err := js.Stream(ctx, StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	if c := h.CachedInfo().Config; c.MaxAge != time.Minute || c.Duplicates != 30*time.Second {
		t.Errorf("HEALTH max_age %v duplicate_window %v, want 1m 30s", c.MaxAge, c.Duplicates)
	}
	tasks, err := js.Stream(ctx, StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	if got := tasks.CachedInfo().Config.Duplicates; got != 2*time.Minute {
		t.Errorf("TASKS duplicate_window %v, want 2m set back", got)
	}
	want := []string{
		"DEADLETTER: max_age 12h kept (flyball's default is 2160h)",
		"DEADLETTER: duplicate_window 12h kept (flyball's default is 24h; nats-server refuses a window longer than the max_age kept)",
		"HEALTH: max_age 1m kept (flyball's default is 168h)",
		"HEALTH: duplicate_window 30s kept (flyball's default is 2m; nats-server refuses a window longer than the max_age kept)",
		"TASKS: duplicate_window 30s set back to 2m (flyball relies on its definition's)",
	}
	if !slices.Equal(report, want) {
		t.Errorf("report %q, want %q", report, want)
	}
	mustEnsureReport(t, js, new([]string))
}

// TestEnsureSaysWhenItSetsDeadLetterWindowBack: DEADLETTER's duplicate
// window is flyball's (24h), not a retention limit an operator keeps:
// Ensure writes it back whether it was shortened (which Check refuses,
// and whose cure is a provision) or raised. Either way it never leaves
// it shorter than the definition's, and never changes it unseen: a
// raised window was cut back to 24h and provision printed that
// everything matched.
func TestEnsureSaysWhenItSetsDeadLetterWindowBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)

	for _, live := range []time.Duration{10 * time.Second, 48 * time.Hour} {
		s := editStream(t, js, StreamDeadLetter, func(c *jetstream.StreamConfig) { c.Duplicates = live })
		var report []string
		mustEnsureReport(t, js, &report)
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Config.Duplicates; got != 24*time.Hour {
			t.Errorf("DEADLETTER duplicate_window %v after Ensure on %v, want the definition's 24h", got, live)
		}
		if err := Check(&info.Config); err != nil {
			t.Errorf("Check after Ensure on %v: %v", live, err)
		}
		want := []string{fmt.Sprintf("DEADLETTER: duplicate_window %s set back to 24h (flyball relies on its definition's)", fmtAge(live))}
		if !slices.Equal(report, want) {
			t.Errorf("report of an Ensure on a %v window %q, want %q", live, report, want)
		}
	}
}
