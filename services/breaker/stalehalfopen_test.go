package breaker_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/breaker"
	"github.com/flyballhq/flyball/streams"
)

// TestStaleHalfOpenIsNotPublishedAfterTheReopening: the half-open
// transition is written to KV, then published. When that publish is late
// (a replica paused, a publish retried while HEALTH elects a leader), the
// probe's failure can re-open the breaker and publish breaker.open first;
// the late breaker.half-open then landed after it, and the governor
// lifted its hold while the breaker was open again. HEALTH must never
// hold a half-open after the open that superseded it.
func TestStaleHalfOpenIsNotPublishedAfterTheReopening(t *testing.T) {
	held, again := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	var calls int
	var mu sync.Mutex
	h := newHarness(t, func(s *breaker.Service) {
		s.Publishing(func(key string, to events.BreakerState) {
			if key != "t1" || to != events.BreakerHalfOpen {
				return
			}
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			switch n {
			case 1:
				close(held)
				<-release
			case 2:
				close(again)
			}
		})
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the service stops
	spec := `{"id":"t1","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1m"},"breaker":{"failureThreshold":3,"openDelay":"200ms"}}`
	if _, err := h.tasks.Put(t.Context(), "t1", []byte(spec)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.outcomeOf(events.OutcomeFailed, "t1", "t1", time.Now())
	}
	<-held                                                    // half-open written, its publish not yet made
	h.outcomeOf(events.OutcomeFailed, "t1", "t1", time.Now()) // the probe fails
	if b, _, _ := h.record("t1"); b.State != events.BreakerOpen || b.OpenDelay != events.Duration(400*time.Millisecond) {
		t.Fatalf("after the probe's failure: %+v, want open with openDelay 400ms", b)
	}
	awaitHealthEvent(t, h.js, events.BreakerSubject(events.BreakerOpen, "t1"))
	free()
	<-again // the late publish is over: the loop moves to the next half-open

	health, err := h.js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	info, err := health.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := health.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(m.Subject, ".t1") {
			order = append(order, m.Header.Get(jetstream.MsgIDHeader))
		}
	}
	opens := 0
	for _, id := range order {
		switch {
		case strings.HasPrefix(id, "breaker:t1:open:"):
			opens++
		case strings.HasPrefix(id, "breaker:t1:half-open:") && opens == 2:
			// a half-open after the re-opening must be the re-opening's own
			b, _, _ := h.record("t1")
			if id != "breaker:t1:half-open:"+strconv.FormatInt(b.RetryAt.UnixMilli(), 10) {
				t.Fatalf("HEALTH holds %s after the re-opening's breaker.open (events for t1, in order: %v)", id, order)
			}
		}
	}
	if opens != 2 {
		t.Fatalf("breaker events for t1 on HEALTH: %v, want two breaker.open", order)
	}
}
