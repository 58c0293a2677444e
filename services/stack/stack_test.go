package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// target records when each request arrived.
type target struct {
	mu       sync.Mutex
	arrivals []time.Time
	headers  []http.Header
	srv      *httptest.Server
}

func newTarget(t *testing.T) *target {
	tg := &target{}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.mu.Lock()
		tg.arrivals = append(tg.arrivals, time.Now())
		tg.headers = append(tg.headers, r.Header.Clone())
		tg.mu.Unlock()
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

func (tg *target) calls() ([]time.Time, []http.Header) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]time.Time(nil), tg.arrivals...), append([]http.Header(nil), tg.headers...)
}

func startStack(t *testing.T, srv *natstest.Server) *stack.Stack {
	t.Helper()
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{
		JS:        js,
		Guard:     executor.Guard{AllowLoopback: true},
		APIAddr:   "127.0.0.1:0",
		APITokens: []string{"test-token-0123456789"},
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(st.Stop)
	return st
}

// createdEvent is what a user would publish with `nats pub`.
func createdEvent(id, data string) []byte {
	return []byte(fmt.Sprintf(`{"specversion":"1.0","type":"io.flyball.task.created","source":"test/user","id":"cmd-%s","subject":%q,"datacontenttype":"application/json","data":%s}`, id, id, data))
}

// TestIntervalTaskRunsOnSchedule runs a 1s task through every service,
// on streams created with the default persist mode and with async persist
// (flyball dev --async-persist).
func TestIntervalTaskRunsOnSchedule(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]streams.Option{"default": nil, "async-persist": {streams.WithAsyncPersist(true)}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			intervalTaskRunsOnSchedule(t, natstest.StartWithStreams(t, opts...))
		})
	}
}

func intervalTaskRunsOnSchedule(t *testing.T, srv *natstest.Server) {
	startStack(t, srv)
	tg := newTarget(t)

	runs := make(chan *nats.Msg, 64)
	natstest.ChanSubscribe(t, srv.NC, "flyball.run.>", runs)

	data := fmt.Sprintf(`{"id":"tick","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, tg.srv.URL)
	if err := srv.NC.Publish("flyball.task.created.tick", createdEvent("tick", data)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "three calls of a 1s task", func() bool {
		a, _ := tg.calls()
		return len(a) >= 3
	})
	// The slots are on a 1s grid and no call comes before its slot. How
	// late a call comes is the benchmarks' to measure (docs/benchmarks.md):
	// the gaps between arrivals moved with the machine's load here.
	arrivals, headers := tg.calls()
	var slots []time.Time
	for i := range 3 {
		slot, err := time.Parse(time.RFC3339Nano, headers[i].Get("Flyball-Scheduled-At"))
		if err != nil {
			t.Fatalf("call %d: Flyball-Scheduled-At: %v", i, err)
		}
		if arrivals[i].Before(slot) {
			t.Errorf("call %d arrived at %s, before its slot %s", i, arrivals[i].Format(time.RFC3339Nano), slot.Format(time.RFC3339Nano))
		}
		slots = append(slots, slot)
	}
	for i := 1; i < 3; i++ {
		if gap := slots[i].Sub(slots[i-1]); gap != time.Second {
			t.Errorf("slot %d is %s after the one before, want 1s (slots %v)", i, gap, slots)
		}
	}
	if k := headers[0].Get("Idempotency-Key"); !strings.HasPrefix(k, "tick:") {
		t.Errorf("Idempotency-Key = %q, want tick:<unix ms>", k)
	}
	// The runs are visible on RUNS as structured CloudEvents.
	seen := 0
	deadline := time.After(5 * time.Second)
	for seen < 2 {
		select {
		case m := <-runs:
			e, err := events.Decode(m.Header, m.Data)
			if err != nil {
				t.Fatalf("run event does not decode: %v", err)
			}
			if e.Type() != events.TypeRunSucceeded {
				t.Fatalf("run event type = %s, want %s", e.Type(), events.TypeRunSucceeded)
			}
			var r events.Run
			if err := events.DecodeData(e, &r); err != nil {
				t.Fatal(err)
			}
			if r.TaskID != "tick" || r.Status != 200 || r.Body != `{"ok":true}` {
				t.Fatalf("run = %+v", r)
			}
			seen++
		case <-deadline:
			t.Fatalf("saw %d run events on flyball.run.>, want >= 2", seen)
		}
	}
}

func TestMalformedCommandsAreRejected(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	startStack(t, srv)
	tg := newTarget(t)

	rejected := make(chan *nats.Msg, 64)
	natstest.ChanSubscribe(t, srv.NC, "flyball.task.rejected.>", rejected)

	url := tg.srv.URL
	cases := []struct {
		name      string
		subject   string
		body      []byte
		wantField string
		wantRule  string
		wantID    string   // the answer's commandId, when the command has one
		alsoWant  []string // further "field: rule" reasons the same answer lists
	}{
		{"not JSON", "flyball.task.created.nojson", []byte(`{this is not json`), "", "not valid JSON", "", nil},
		{"old specversion", "flyball.task.created.oldspec", []byte(`{"specversion":"0.3","type":"io.flyball.task.created","source":"t","id":"cmd-oldspec","data":{"id":"oldspec"}}`), "specversion", `must be "1.0"`, "cmd-oldspec", nil},
		{"bad cron", "flyball.task.created.badcron", createdEvent("badcron", fmt.Sprintf(`{"id":"badcron","target":{"http":{"url":%q}},"schedule":{"cron":"61 * * * *"}}`, url)), "schedule.cron", "minute", "", nil},
		{"interval below 1s", "flyball.task.created.fast", createdEvent("fast", fmt.Sprintf(`{"id":"fast","target":{"http":{"url":%q}},"schedule":{"interval":"200ms"}}`, url)), "schedule.interval", "must be >= 1s, got 200ms", "", nil},
		{"id not a subject token", "flyball.task.created.badid", []byte(fmt.Sprintf(`{"specversion":"1.0","type":"io.flyball.task.created","source":"t","id":"cmd-badid","datacontenttype":"application/json","data":{"id":"bad.id*","target":{"http":{"url":%q}},"schedule":{"interval":"5s"}}}`, url)), "id", "[A-Za-z0-9_-]", "", nil},
		{"wrong field type", "flyball.task.created.wrongtype", createdEvent("wrongtype", fmt.Sprintf(`{"id":"wrongtype","target":{"http":{"url":%q}},"schedule":{"interval":5}}`, url)), "schedule.interval", "duration string", "", nil},
		{"unknown verb", "flyball.task.frobbed.verb", createdEvent("verb", fmt.Sprintf(`{"id":"verb","target":{"http":{"url":%q}},"schedule":{"interval":"5s"}}`, url)), "subject", "unknown task action", "", nil},
		{"unknown field", "flyball.task.created.unknown", createdEvent("unknown", fmt.Sprintf(`{"id":"unknown","target":{"http":{"url":%q}},"schedule":{"interval":"5s"},"colour":"red"}`, url)), "colour", "unknown field", "", nil},
		{
			"several mistakes at once", "flyball.task.created.several",
			createdEvent("several", fmt.Sprintf(`{"id":"several","colour":"red","target":{"http":{"url":%q,"timeout":"soon"}},"schedule":{"interval":5},"jitter":"x","labels":{"team":1}}`, url)),
			"colour", "unknown field", "",
			[]string{"target.http.timeout: duration string", "schedule.interval: duration string", "jitter: got string, want number", "labels.team: got number, want string"},
		},
	}
	for _, c := range cases {
		if err := srv.NC.Publish(c.subject, c.body); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]events.TaskRejected{}
	deadline := time.After(10 * time.Second)
	for len(got) < len(cases) {
		select {
		case m := <-rejected:
			e, err := events.Decode(m.Header, m.Data)
			if err != nil {
				t.Fatalf("task.rejected does not decode: %v", err)
			}
			var r events.TaskRejected
			if err := events.DecodeData(e, &r); err != nil {
				t.Fatal(err)
			}
			got[r.Subject] = r
		case <-deadline:
			t.Fatalf("got %d task.rejected events, want %d: %+v", len(got), len(cases), got)
		}
	}
	for _, c := range cases {
		r, ok := got[c.subject]
		if !ok {
			t.Errorf("%s: no task.rejected for %s", c.name, c.subject)
			continue
		}
		found := false
		for _, reason := range r.Reasons {
			if reason.Field == c.wantField && strings.Contains(reason.Rule, c.wantRule) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: reasons %+v, want field %q with %q", c.name, r.Reasons, c.wantField, c.wantRule)
		}
		if c.alsoWant != nil && len(r.Reasons) != 1+len(c.alsoWant) {
			t.Errorf("%s: %d reasons %+v, want %d", c.name, len(r.Reasons), r.Reasons, 1+len(c.alsoWant))
		}
		for i, w := range c.alsoWant {
			field, rule, _ := strings.Cut(w, ": ")
			if i+1 >= len(r.Reasons) || r.Reasons[i+1].Field != field || !strings.Contains(r.Reasons[i+1].Rule, rule) {
				t.Errorf("%s: reason %d of %+v, want field %q with %q", c.name, i+1, r.Reasons, field, rule)
			}
		}
		if c.wantID != "" && r.CommandID != c.wantID {
			t.Errorf("%s: the answer's commandId is %q, want %q (what the sender needs to match it)", c.name, r.CommandID, c.wantID)
		}
	}

	// Every service is still up: a valid task runs.
	data := fmt.Sprintf(`{"id":"after","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, url)
	if err := srv.NC.Publish("flyball.task.created.after", createdEvent("after", data)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "a valid task runs after the malformed ones", func() bool {
		a, _ := tg.calls()
		return len(a) >= 2
	})
}

func TestAPICreatesTaskWithAuth(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	st := startStack(t, srv)
	tg := newTarget(t)
	base := "http://" + st.API.Addr()

	body := fmt.Sprintf(`{"id":"viaapi","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, tg.srv.URL)
	for _, c := range []struct {
		name  string
		token string
		want  int
	}{
		{"missing token", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope-nope-nope-nope", http.StatusUnauthorized},
		{"right token", "Bearer test-token-0123456789", http.StatusAccepted},
	} {
		req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/tasks", strings.NewReader(body))
		if c.token != "" {
			req.Header.Set("Authorization", c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("%s: status %d, want %d (%v)", c.name, resp.StatusCode, c.want, out)
		}
		if c.want == http.StatusAccepted && out["status"] != "accepted" {
			t.Fatalf("%s: body %v, want status accepted", c.name, out)
		}
		if c.want != http.StatusAccepted && out["detail"] == "" {
			t.Fatalf("%s: error body without detail: %v", c.name, out)
		}
	}
	natstest.Eventually(t, 10*time.Second, "the API-created task runs", func() bool {
		a, _ := tg.calls()
		return len(a) >= 1
	})
	// A bad spec is refused before it reaches NATS, naming the field.
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/tasks", strings.NewReader(`{"id":"x","target":{"http":{"url":"http://a"}},"schedule":{"interval":"10ms"}}`))
	req.Header.Set("Authorization", "Bearer test-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var apiErr struct{ Field, Detail string }
	_ = json.NewDecoder(resp.Body).Decode(&apiErr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || apiErr.Field != "schedule.interval" {
		t.Fatalf("bad spec: status %d, error %+v; want 400 naming schedule.interval", resp.StatusCode, apiErr)
	}
}
