package sweeper

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
// refuses each purge request (a permissions violation, which nats.go
// reports only to the connection's error handler: the request itself
// times out). Each pass must log the warning for each of the three
// buckets, remove nothing and count nothing, and leave the markers; and
// the permissions violation, which names the refused subject, must reach
// the connection's error handler, where `flyball serve` logs it.
func TestRefusedPurgeIsLoggedEachPass(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithUsers(t,
		&server.User{Username: "admin", Password: "pw"},
		&server.User{Username: "sweeper", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.PURGE.>"}},
		}},
	)
	ctx := t.Context()
	_, admin := natstest.ConnectAs(t, srv, "admin", "pw")
	if err := streams.Ensure(ctx, admin); err != nil {
		t.Fatal(err)
	}
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
		if _, err := kv.Put(ctx, "gone", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		before[b] = msgs(b)
	}

	var mu sync.Mutex
	var async []string // the connection's asynchronous errors
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("sweeper", "pw"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		async = append(async, err.Error())
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// A refused request is answered by no one: each purge waits out the
	// timeout, shortened here from nats.go's 5 s.
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	logs := &records{}
	clock := &shiftedClock{}
	s := startHourlyWith(t, svcconf.Common{JS: js, Now: clock.Now, Logger: slog.New(logs)})
	s.compactions.Wait() // the first pass found the markers young

	const warning = "removing old delete markers failed; the next pass retries"
	for pass, shift := range []time.Duration{25 * time.Hour, 26 * time.Hour} {
		clock.shift.Store(int64(shift))
		if err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		s.compactions.Wait()
		got := logs.named(warning)
		if pass == 0 && len(got) > 0 {
			t.Logf("the warning's error: %s", got[0].attrs["err"])
		}
		if len(got) != 3*(pass+1) {
			t.Fatalf("pass %d: %d warnings %q, want one per bucket each pass (%d): %+v", pass+1, len(got), warning, 3*(pass+1), got)
		}
		for _, b := range names {
			var found bool
			for _, r := range got[3*pass:] {
				if r.level == slog.LevelWarn && r.attrs["bucket"] == b && r.attrs["removed"] == "0" && r.attrs["err"] != "" {
					found = true
				}
			}
			if !found {
				t.Errorf("pass %d: no warning for %s with removed=0 and the error: %+v", pass+1, b, got[3*pass:])
			}
			if n := msgs(b); n != before[b] {
				t.Errorf("pass %d: %s holds %d messages, want the %d stored (a refused purge removes nothing)", pass+1, b, n, before[b])
			}
			if n := testutil.ToFloat64(s.cfg.Metrics.MarkersCompacted.WithLabelValues(b)); n != 0 {
				t.Errorf("pass %d: %s: flyball_kv_delete_markers_removed_total = %v, want 0", pass+1, b, n)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range names {
		subject := "$JS.API.STREAM.PURGE.KV_" + b
		if !containsAny(async, subject) {
			t.Errorf("no permissions violation for %s reached the connection's error handler: %q", subject, async)
		}
	}
}

// containsAny reports whether any of list contains sub.
func containsAny(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
