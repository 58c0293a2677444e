package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/heartbeat"
	"github.com/flyballhq/flyball/services/internal/lease"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/timer"
	"github.com/flyballhq/flyball/streams"
)

// stalenessRow matches a task line of the status table's staleness list.
var stalenessRow = regexp.MustCompile(`(?m)^  (t\d\d)  +\d\.\d\d  `)

// TestStatusListsTheTenStalest: `flyball status` lists the 10 stalest
// tasks and says how many more there are and how to see them; --stale
// lists more, and -o json lists as many as the API (1000) unless --stale
// is given. It printed one line per task: 100,000 lines at 100,000 tasks.
func TestStatusListsTheTenStalest(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	now := time.Now().UTC()
	// t00..t11 run every minute; tN last succeeded N minutes ago, so the
	// higher N, the staler (t05 and above score 1 and come by id).
	for i := range 12 {
		id := fmt.Sprintf("t%02d", i)
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, events.TaskSpec{
			ID: id, Target: events.Target{HTTP: &events.HTTPTarget{URL: "http://example.test/"}},
			Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
		})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, id, gov.State{
			TaskID: id, NextRunAt: now.Add(time.Hour), LastSuccessAt: now.Add(-time.Duration(i) * time.Minute),
		})
	}
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	rows := func(out string) string {
		var ids []string
		for _, m := range stalenessRow.FindAllStringSubmatch(out, -1) {
			ids = append(ids, m[1])
		}
		return strings.Join(ids, " ")
	}

	out := e.ok(t, "status")
	if got, want := rows(out), "t05 t06 t07 t08 t09 t10 t11 t04 t03 t02"; got != want ||
		!strings.Contains(out, "staleness     12 task(s), stalest first\n") ||
		!strings.Contains(out, "  … and 2 more (flyball status --stale 12 lists them all)\n") {
		t.Fatalf("status: staleness rows %q, want %q, a count of 12 and a line for the 2 more:\n%s", got, want, out)
	}
	out = e.ok(t, "status", "--stale", "20")
	if got := rows(out); len(strings.Fields(got)) != 12 || strings.Contains(out, "more (flyball status") {
		t.Fatalf("status --stale 20: rows %q, want all 12 and no more line:\n%s", got, out)
	}
	out = e.ok(t, "status", "--stale", "0")
	if got := rows(out); got != "" || !strings.Contains(out, "  … and 12 more (flyball status --stale 12 lists them all)\n") {
		t.Fatalf("status --stale 0: rows %q, want none and a line for the 12:\n%s", got, out)
	}

	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"status", "-o", "json"}, 12},
		{[]string{"status", "--json", "--stale", "3"}, 3},
	} {
		// Decoded as a client of the API would, by the JSON names.
		var h struct {
			Staleness []struct {
				TaskID string `json:"taskId"`
			} `json:"staleness"`
			StalenessCount int `json:"stalenessCount"`
		}
		if err := json.Unmarshal([]byte(e.ok(t, c.args...)), &h); err != nil {
			t.Fatal(err)
		}
		if len(h.Staleness) != c.want || h.StalenessCount != 12 || (len(h.Staleness) > 0 && h.Staleness[0].TaskID != "t05") {
			t.Errorf("flyball %s: %d entries, stalenessCount %d, %+v; want %d, 12, t05 first", strings.Join(c.args, " "), len(h.Staleness), h.StalenessCount, h.Staleness, c.want)
		}
	}
}

// TestStatusSaysALeaseHolderWithADotInItsNameIsOffline: a timer named
// after a host with dots (the default instance is <host>-<pid>, as
// ip-10-0-1-7.ec2.internal-42) holds the lease under the name its
// heartbeat registers, the NAME column of `flyball runtime`, so `flyball
// status` says it is OFFLINE once it stops beating. The heartbeat
// sanitized the name (dots to _) and the lease kept it raw, so status
// never matched the two.
func TestStatusSaysALeaseHolderWithADotInItsNameIsOffline(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	ctx := context.Background()
	const instance = "ip-10-0-1-7.ec2.internal-42"
	// As stack.Start runs a timer: the service, and its heartbeat under
	// the same instance name.
	tm, err := timer.New(timer.Config{JS: srv.JS, Instance: instance, Lease: 3 * time.Second, Metrics: metrics.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tm.Stop)
	beater := heartbeat.Start(ctx, heartbeat.Config{JS: srv.JS, Kind: "timer", Name: instance, NoClock: true, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(beater.Stop)
	runtime, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := srv.JS.KeyValue(ctx, streams.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	var hb events.Heartbeat
	var holder string
	natstest.Eventually(t, 10*time.Second, "the timer registers and takes the lease", func() bool {
		keys, err := runtime.ListKeys(ctx)
		if err != nil {
			return false
		}
		var registered []string
		for k := range keys.Keys() {
			registered = append(registered, k)
		}
		e, err := leases.Get(ctx, streams.LeaseTimer)
		if err != nil || len(registered) != 1 {
			return false
		}
		r, err := runtime.Get(ctx, registered[0])
		if err != nil || json.Unmarshal(r.Value(), &hb) != nil {
			return false
		}
		holder = lease.HolderOf(e.Value())
		return true
	})
	if holder != hb.Name {
		t.Fatalf("the lease holder is %q, the runtime name (flyball runtime's NAME) %q; want them equal", holder, hb.Name)
	}

	// The process dies without deregistering, and the sweeper marks it
	// offline; its lease is not yet taken over.
	beater.Stop()
	hb.Status = events.RuntimeOffline
	natstest.PutJSON(t, srv.JS, streams.BucketRuntime, heartbeat.Key(hb.Kind, hb.Name), hb)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	out := e.ok(t, "status")
	if want := "  timer lease: " + hb.Name + " is OFFLINE"; !strings.Contains(out, want) {
		t.Fatalf("status with the lease holder offline lacks %q:\n%s", want, out)
	}
}
