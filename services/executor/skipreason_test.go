package executor

import (
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestInvalidStoredURLKeepsItsSecretsOutOfTheSkipReason: a stored spec
// whose URL does not parse is skipped with the validation error as the
// run.skipped reason. url.Parse's error quotes the whole URL, user
// password and ?token= included, and so did the reason, on RUNS and in
// flyball runs and explain.
func TestInvalidStoredURLKeepsItsSecretsOutOfTheSkipReason(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	const id = "badurl"
	startExecutor(t, srv, newLogLines(), events.TaskSpec{
		ID:       id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "https://user:hunter2@example.com/%zz?token=hunter3"}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
	})
	dispatchNow(t, srv.JS, id)
	var run events.Run
	natstest.Eventually(t, 20*time.Second, "a run.skipped", func() bool {
		var ok bool
		run, ok = lastRun(t, srv.JS, events.OutcomeSkipped, id)
		return ok
	})
	if !strings.Contains(run.Reason, "target.http.url") {
		t.Fatalf("reason %q does not name the field", run.Reason)
	}
	if strings.Contains(run.Reason, "hunter") {
		t.Fatalf("the run.skipped reason carries the URL's secrets: %q", run.Reason)
	}
}

// TestInvalidStoredURLWithASlashInItsPasswordIsNotQuoted: a stored spec
// whose URL has a password holding a "/" (base64 secrets often do) does
// not parse, and url.Parse's cause, which the reason kept, quoted the
// password as a port (`invalid port ":hunter2" after host`) in
// run.skipped's reason and the executor's log.
func TestInvalidStoredURLWithASlashInItsPasswordIsNotQuoted(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	raw := []byte(`{"id":"x","target":{"http":{"url":"https://admin:hunter2/Zm9v@api.example.com/v1"}},"schedule":{"interval":"1h"}}`)
	_, err := s.decodeTask("x", raw)
	if err == nil {
		t.Fatal("the spec validated")
	}
	if reason := capText(err.Error(), 1000); strings.Contains(reason, "hunter2") || !strings.Contains(reason, "target.http.url") {
		t.Errorf("the run.skipped reason is %q, want it to name target.http.url without quoting the password", reason)
	}
}

// TestStoredSpecReasonNamesOnlyWhatItHolds: decodeTask validates a stored
// spec before it normalizes it. Normalizing first (as
// kvcache.DecodeStoredSpec does) defaults an absent retry.maxDelay or
// breaker.maxOpenDelay to an initialDelay or openDelay over 24h, and the
// reason then also blames the field the spec never set.
func TestStoredSpecReasonNamesOnlyWhatItHolds(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	for policy, absent := range map[string]string{`"retry":{"initialDelay":"30h"}`: "maxDelay", `"breaker":{"openDelay":"30h"}`: "maxOpenDelay"} {
		raw := []byte(`{"id":"x","target":{"http":{"url":"https://api.example.com/"}},"schedule":{"interval":"1h"},` + policy + `}`)
		_, err := s.decodeTask("x", raw)
		if err == nil {
			t.Fatalf("the spec with %s validated", policy)
		}
		if strings.Contains(err.Error(), absent) {
			t.Errorf("the reason for %s names %s, which it does not set: %v", policy, absent, err)
		}
	}
}

// TestStoredURLWithNoHostNameIsSkippedNamingTheURL: a stored spec whose
// target.http.url names a port and no host (http://:8080/, which older
// versions accepted) can never be called. Each run failed at the dial as
// "destination blocked by SSRF guard: bad address \":8080\"", which
// blames the guard, and was dead-lettered, its rechecks too. The stored
// spec does not validate (ValidateStored): the run is skipped, with the
// rule on the URL as its reason, and the task stays stored, to be
// updated or deleted.
func TestStoredURLWithNoHostNameIsSkippedNamingTheURL(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	const id = "nohost"
	startExecutor(t, srv, newLogLines(), events.TaskSpec{
		ID:       id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "http://:8080/"}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
	})
	dispatchNow(t, srv.JS, id)
	var (
		run     events.Run
		skipped bool
	)
	natstest.Eventually(t, 20*time.Second, "a run.skipped or run.failed", func() bool {
		if run, skipped = lastRun(t, srv.JS, events.OutcomeSkipped, id); skipped {
			return true
		}
		var failed bool
		run, failed = lastRun(t, srv.JS, events.OutcomeFailed, id)
		return failed
	})
	if !skipped {
		t.Fatalf("the run failed (%q); want it skipped, naming target.http.url", run.Error)
	}
	if want := `target.http.url: must have a host name, got ":8080"`; !strings.Contains(run.Reason, want) || strings.Contains(run.Reason, "SSRF") {
		t.Errorf("reason %q, want it to say %q and not blame the SSRF guard", run.Reason, want)
	}
}
