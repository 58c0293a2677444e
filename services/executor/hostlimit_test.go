package executor

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestHostLimitIsPerCanonicalHost: the PerHost limit counts a host
// however its tasks spell it. It was keyed by the URL's raw host, so
// https://API.example.com and https://api.example.com:443 each had
// their own 16 calls, and so did every other spelling of one host. An
// internationalized name was left in Unicode: https://bücher.example and
// https://xn--bcher-kva.example, one host, had 16 calls each. A port
// was compared as written (https://api.example.com:0443, which dials
// 443, had its own calls), and so was a name's trailing dot
// (api.example.com.).
func TestHostLimitIsPerCanonicalHost(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	for _, c := range []struct {
		a, b   string
		shared bool
	}{
		{"https://API.example.com/a", "https://api.example.com:443/b", true},
		{"HTTPS://api.example.com/", "https://api.example.com:443/", true},
		{"http://api.example.com/", "https://api.example.com/", true},
		{"http://Example.COM/", "http://example.com:80/x", true},
		{"https://api.example.com:/", "https://api.example.com/", true},
		{"http://[2001:DB8::1]/", "http://[2001:db8::1]:80/", true},
		{"https://[2001:db8::1]:8443/", "https://[2001:DB8::1]:8443/", true},
		{"https://api.example.com/", "https://api.example.com:8443/", false},
		{"https://api.example.com/", "https://other.example.com/", false},
		{"http://[2001:db8::1]/", "http://[2001:db8::2]/", false},
		{"https://bücher.example/", "https://xn--bcher-kva.example/", true},
		{"https://Bücher.example/", "https://XN--BCHER-KVA.example:443/", true},
		{"https://bücher.example/", "https://bächer.example/", false},
		{"https://api.example.com:0443/", "https://api.example.com/", true},
		{"https://api.example.com:08443/", "https://api.example.com:8443/", true},
		{"http://api.example.com:00080/", "http://api.example.com:080/", true}, // a port of 0 does not validate
		{"https://api.example.com./", "https://api.example.com/", true},
		{"https://API.example.com.:0443/", "https://api.example.com/", true},
		{"https://bücher.example./", "https://xn--bcher-kva.example/", true},
		{"https://api.example.com../", "https://api.example.com/", false},
	} {
		s, err := New(Config{JS: srv.JS, PerHost: 1, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		hostOf := func(raw string) string {
			t.Helper()
			spec := events.TaskSpec{ID: "x", Target: events.Target{HTTP: &events.HTTPTarget{URL: raw}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}}
			b, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			task, err := s.decodeTask("x", b)
			if err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			return task.host
		}
		ha, hb := hostOf(c.a), hostOf(c.b)
		if _, ok := s.tryHost(ha); !ok {
			t.Fatalf("%s: the first call of an idle host found it at its limit", c.a)
		}
		_, ok := s.tryHost(hb)
		switch {
		case ok && c.shared:
			t.Errorf("%s (host %q) took a slot while a call of %s (host %q) holds the one slot (PerHost 1): one host, want it at its limit", c.b, hb, c.a, ha)
		case !ok && !c.shared:
			t.Errorf("%s (host %q) found no slot while a call of %s (host %q) runs: another host, want a slot of its own", c.b, hb, c.a, ha)
		}
	}
}

// gatedTarget answers every call once open is closed, and counts calls.
type gatedTarget struct {
	srv   *httptest.Server
	open  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	calls int
}

func newGatedTarget(t *testing.T) *gatedTarget {
	t.Helper()
	g := &gatedTarget{open: make(chan struct{})}
	g.srv = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.calls++
		g.mu.Unlock()
		select {
		case <-g.open:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(g.srv.Close)
	t.Cleanup(g.release) // before srv.Close, which waits for its handlers
	return g
}

func (g *gatedTarget) release() { g.once.Do(func() { close(g.open) }) }

func (g *gatedTarget) called() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// hostTable returns the hosts s keeps call slots for, sorted.
func hostTable(s *Service) []string {
	s.hostMu.Lock()
	defer s.hostMu.Unlock()
	return slices.Sorted(maps.Keys(s.hosts))
}

// awaitHostTable waits until s keeps slots for exactly want hosts.
func awaitHostTable(t *testing.T, s *Service, within time.Duration, want []string, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got := hostTable(s)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the host table holds %d hosts %v, want %v", what, len(got), got, want)
		}
		<-tick.C
	}
}

// hostWaiters is how many goroutines wait for a host slot of s
// (acquireHost).
func hostWaiters(s *Service) int {
	in := fmt.Sprintf("executor.(*Service).acquireHost(%p", s)
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, in) {
			n++
		}
	}
	return n
}

// TestHostTableEmptiesWhenNoCallHoldsASlot: the executor keeps a host's
// PerHost slots only while a call holds or waits for one of them. It
// kept every host it ever called, for good: with a host per customer,
// memory grew with every distinct host until restart. Here calls to many
// hosts, dispatches held for a busy host's slot, a dispatch parked by its
// breaker, and a shutdown that hands back a dispatch waiting for a slot
// (and cancels the call holding it) all leave the table empty.
func TestHostTableEmptiesWhenNoCallHoldsASlot(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	nc, _ := srv.Connect(t)
	js, err := jsutil.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := New(Config{JS: js, PerHost: 1, Guard: Guard{AllowLoopback: true}, Logger: quietLog(), ShutdownGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	put := func(id, url string) {
		t.Helper()
		spec := events.TaskSpec{ID: id, Target: events.Target{HTTP: &events.HTTPTarget{URL: url}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}}
		spec.Normalize()
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, spec)
	}
	var ids []string
	// Many hosts, each its own (a listener each), one call each.
	const hosts = 24
	for i := range hosts {
		p := newPathTarget(t)
		id := fmt.Sprintf("plain%d", i)
		put(id, p.url+"/"+id)
		ids = append(ids, id)
	}
	// One busy host: busy1 holds its one slot, busy2 and busy3 wait for
	// it (held, waitForHost).
	busy := newGatedTarget(t)
	for _, id := range []string{"busy1", "busy2", "busy3"} {
		put(id, busy.srv.URL+"/"+id)
	}
	// One task whose breaker is open for a moment: parked, then called.
	parked := newPathTarget(t)
	put("parked", parked.url+"/parked")
	retryAt := time.Now().Add(time.Second).UTC()
	natstest.PutJSON(t, srv.JS, streams.BucketBreakers, "parked", BreakerRecord{
		Key: "parked", State: events.BreakerOpen, Failures: 3, OpenDelay: events.Duration(time.Second), RetryAt: retryAt, UpdatedAt: time.Now().UTC(),
	})
	// One host still busy at shutdown: stuck1 holds its slot, stuck2
	// waits for it and is handed back.
	stuck := newGatedTarget(t)
	for _, id := range []string{"stuck1", "stuck2"} {
		put(id, stuck.srv.URL+"/"+id)
	}
	if err := ex.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
	natstest.Eventually(t, 10*time.Second, "the executor's spec and breaker views loaded", func() bool {
		return ex.specs.Lookup("stuck2").Found && ex.breakers.Lookup("parked").Found
	})

	dispatchOf(t, srv.JS, "busy1", time.Time{})
	natstest.Eventually(t, 10*time.Second, "busy1's call in flight", func() bool { return busy.called() == 1 })
	dispatchOf(t, srv.JS, "busy2", time.Time{})
	dispatchOf(t, srv.JS, "busy3", time.Time{})
	dispatchOf(t, srv.JS, "parked", time.Time{})
	for _, id := range ids {
		dispatchOf(t, srv.JS, id, time.Time{})
	}
	natstest.Eventually(t, 10*time.Second, "busy2 and busy3 wait for the busy host's slot", func() bool { return hostWaiters(ex) == 2 })
	natstest.Eventually(t, 10*time.Second, "the parked dispatch deferred", func() bool {
		return testutil.ToFloat64(ex.cfg.Metrics.DispatchDeferred) == 1
	})
	busy.release()
	for _, id := range append(ids, "busy1", "busy2", "busy3", "parked") {
		if o, r := outcomeOf(t, srv.JS, id); o != events.OutcomeSucceeded {
			t.Fatalf("%s: run.%s (%s), want run.succeeded", id, o, r.Reason)
		}
	}
	if n := busy.called(); n != 3 {
		t.Fatalf("the busy host got %d calls, want 3", n)
	}
	awaitHostTable(t, ex, 10*time.Second, nil, "every call ended")

	dispatchOf(t, srv.JS, "stuck1", time.Time{})
	natstest.Eventually(t, 10*time.Second, "stuck1's call in flight", func() bool { return stuck.called() == 1 })
	dispatchOf(t, srv.JS, "stuck2", time.Time{})
	natstest.Eventually(t, 10*time.Second, "stuck2 waits for the stuck host's slot", func() bool { return hostWaiters(ex) == 1 })
	if got := hostTable(ex); len(got) != 1 {
		t.Fatalf("while a call holds a slot and another waits, the host table holds %v, want the one host", got)
	}
	ex.Stop()
	awaitHostTable(t, ex, 10*time.Second, nil, "after Stop handed stuck2 back and cancelled stuck1's call")
	if n := stuck.called(); n != 1 {
		t.Fatalf("the stuck host got %d calls, want 1 (stuck2 handed back uncalled)", n)
	}
}

// TestHostSlotCostsNoAllocation: taking and releasing a host slot, the
// work of every call, allocates nothing once the executor has run a few
// calls: an idle host's entry is dropped, and the next host reuses it.
func TestHostSlotCostsNoAllocation(t *testing.T) {
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"a.example.com", "b.example.com", "c.example.com:8443"}
	call := func() {
		for _, h := range hosts {
			slot, ok := s.tryHost(h)
			if !ok {
				t.Fatal("no slot of an idle host")
			}
			s.releaseHost(slot)
		}
	}
	call() // the table's buckets, and the first entry
	if n := testing.AllocsPerRun(100, call); n != 0 {
		t.Errorf("%v allocations for %d calls to idle hosts, want 0", n, len(hosts))
	}
	if got := hostTable(s); len(got) != 0 {
		t.Errorf("the host table holds %v after every call ended, want none", got)
	}
}

// BenchmarkHostSlot is a call's share of the PerHost limit: take and
// release a slot of a host no other call holds (its entry comes and
// goes), and of one that another call holds throughout (it stays).
//
//	go test -run '^$' -bench BenchmarkHostSlot -benchmem ./executor/
func BenchmarkHostSlot(b *testing.B) {
	srv := natstest.Start(b)
	s, err := New(Config{JS: srv.JS, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("idle", func(b *testing.B) {
		for b.Loop() {
			slot, _ := s.tryHost("api.example.com")
			s.releaseHost(slot)
		}
	})
	b.Run("busy", func(b *testing.B) {
		held, _ := s.tryHost("busy.example.com")
		defer s.releaseHost(held)
		for b.Loop() {
			slot, _ := s.tryHost("busy.example.com")
			s.releaseHost(slot)
		}
	})
}
