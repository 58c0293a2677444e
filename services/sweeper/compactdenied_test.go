package sweeper

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestRefusedPurgeIsLoggedEachPass: security.md lets an operator leave
// the stream purges out of the sweeper's NATS user ("Left out, the
// markers stay, and the sweeper logs a warning each hour"). The server
// refuses each purge request with a permissions violation, which nats.go
// reports only to the connection's error handler: the request itself
// heard nothing and waited out the JetStream timeout (5 s by default, so
// 15 s a pass), and the warning said only "context deadline exceeded".
// Each pass must log, for each of the three buckets, one warning that
// names the refused subject and what to do, after one purge request (the
// bucket's other markers are not tried, as before the fix: they would be
// refused alike),
// ended by the refusal rather than by the timeout; remove nothing, count
// nothing, and leave the markers. The violation still reaches the
// connection's own error handler, where `flyball serve` logs it.
func TestRefusedPurgeIsLoggedEachPass(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var async []string // the connection's asynchronous errors
	_, admin, js := natstest.StartDenying(t, "sweeper", "$JS.API.STREAM.PURGE.>", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		async = append(async, err.Error())
		mu.Unlock()
	}))
	nc := js.Conn()
	ctx := t.Context()
	names := []string{streams.BucketTasks, streams.BucketSchedules, streams.BucketBreakers}
	msgs := func(b string) uint64 {
		st, err := bucket(t, admin, b).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.Msgs
	}
	before := map[string]uint64{}
	for _, b := range names {
		kv := bucket(t, admin, b)
		// Three markers each: a pass that went on after the refusal
		// would send three purge requests.
		for _, key := range []string{"gone-1", "gone-2", "gone-3"} {
			if _, err := kv.Put(ctx, key, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		before[b] = msgs(b)
	}

	// refusals counts the violations for subject handed to the
	// connection's error handler: one per purge request the server refused.
	refusals := func(subject string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, e := range async {
			if strings.Contains(e, strconv.Quote(subject)) {
				n++
			}
		}
		return n
	}
	// A refused request is answered by no one: a purge not ended by the
	// refusal waits out js's default timeout (5s) and fails "context
	// deadline exceeded".
	logs := &records{}
	clock := &shiftedClock{}
	s := startHourlyWith(t, svcconf.Common{JS: js, Now: clock.Now, Logger: slog.New(logs)})
	s.compactions.Wait() // the first pass found the markers young

	compaction := func() []record { // the passes' warnings so far
		var out []record
		logs.mu.Lock()
		defer logs.mu.Unlock()
		for _, r := range logs.list {
			if r.level == slog.LevelWarn && strings.Contains(r.msg, "delete markers") {
				out = append(out, r)
			}
		}
		return out
	}
	for pass, shift := range []time.Duration{25 * time.Hour, 26 * time.Hour} {
		clock.shift.Store(int64(shift))
		if err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		s.compactions.Wait()
		// The server answers in order and nats.go hands the connection's
		// asynchronous errors on in order: once a refusal sent after the
		// pass is seen, every refusal of the pass has been counted.
		sentinel := fmt.Sprintf("$JS.API.STREAM.PURGE.after-pass-%d", pass+1)
		if err := nc.Publish(sentinel, nil); err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 10*time.Second, "the refusal of "+sentinel, func() bool { return refusals(sentinel) == 1 })

		got := compaction()
		if len(got) != 3*(pass+1) {
			t.Fatalf("pass %d: %d warnings about delete markers, want one per bucket each pass (%d): %+v", pass+1, len(got), 3*(pass+1), got)
		}
		for _, b := range names {
			subject := "$JS.API.STREAM.PURGE.KV_" + b
			var w *record
			for i := range got[3*pass:] {
				if got[3*pass+i].attrs["bucket"] == b {
					w = &got[3*pass+i]
				}
			}
			switch {
			case w == nil:
				t.Errorf("pass %d: no warning for %s: %+v", pass+1, b, got[3*pass:])
			case w.attrs["permission"] != subject || !strings.Contains(w.msg, "accounts.conf") || w.attrs["removed"] != "0":
				t.Errorf("pass %d: %s: warning %q permission=%q removed=%s err=%q; want it to name the refused %s, say to grant it in accounts.conf, and removed=0",
					pass+1, b, w.msg, w.attrs["permission"], w.attrs["removed"], w.attrs["err"], subject)
			case strings.Contains(w.attrs["err"], "deadline exceeded"):
				t.Errorf("pass %d: %s: err=%q: the refused purge waited out its timeout", pass+1, b, w.attrs["err"])
			}
			if n := refusals(subject); n != pass+1 {
				t.Errorf("pass %d: the server refused %d purge requests to %s in all, want one a pass (%d): the bucket's other markers are refused alike", pass+1, n, subject, pass+1)
			}
			if n := msgs(b); n != before[b] {
				t.Errorf("pass %d: %s holds %d messages, want the %d stored (a refused purge removes nothing)", pass+1, b, n, before[b])
			}
			if n := testutil.ToFloat64(s.cfg.Metrics.MarkersCompacted.WithLabelValues(b)); n != 0 {
				t.Errorf("pass %d: %s: flyball_kv_delete_markers_removed_total = %v, want 0", pass+1, b, n)
			}
		}
	}
}
