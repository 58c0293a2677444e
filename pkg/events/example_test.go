package events_test

import (
	"fmt"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// A producer builds a task.created command and encodes it in structured
// mode. A fixed id makes the command deduplicate when it is resent; here the
// fixed time also makes the output reproducible.
func ExampleEncode() {
	spec := events.TaskSpec{
		ID:       "poll-prices",
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/prices"}},
		Schedule: events.Schedule{Interval: events.Duration(30 * time.Second)},
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	e, err := events.New(events.TypeTaskCreated, "flyball/cli", spec.ID, spec, at, "cmd-0001")
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := events.Encode(e)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(events.TaskSubject(events.VerbCreated, spec.ID))
	fmt.Println(string(b))
	// Output:
	// flyball.task.created.poll-prices
	// {"specversion":"1.0","id":"cmd-0001","source":"flyball/cli","type":"io.flyball.task.created","subject":"poll-prices","datacontenttype":"application/json","time":"2026-03-01T12:00:00Z","data":{"id":"poll-prices","target":{"http":{"url":"https://example.com/prices"}},"schedule":{"interval":"30s"}}}
}

// A consumer decodes a structured event and the task spec it carries. The
// spec comes back validated and normalized: every default is filled in.
func ExampleDecodeTaskSpec() {
	msg := []byte(`{
		"specversion": "1.0",
		"id": "cmd-0001",
		"source": "flyball/cli",
		"type": "io.flyball.task.created",
		"subject": "nightly-report",
		"time": "2026-03-01T12:00:00Z",
		"datacontenttype": "application/json",
		"data": {
			"id": "nightly-report",
			"target": {"nats": {"subject": "reports.build"}},
			"schedule": {"cron": "0 0 9 * * *", "timezone": "Europe/Berlin"}
		}
	}`)
	e, err := events.Decode(nil, msg)
	if err != nil {
		fmt.Println(err)
		return
	}
	spec, err := events.DecodeTaskSpec(e)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Type(), e.ID(), e.Time().Format(time.RFC3339))
	fmt.Println(spec.ID, spec.Target.NATS.Subject, spec.Target.NATS.Timeout)
	fmt.Printf("%q in %s\n", spec.Schedule.Cron, spec.Schedule.Timezone)
	fmt.Println("retry:", spec.Retry.MaxAttempts, "attempts,", spec.Retry.InitialDelay, "up to", spec.Retry.MaxDelay)
	fmt.Println("catch-up:", spec.CatchUp)
	// Output:
	// io.flyball.task.created cmd-0001 2026-03-01T12:00:00Z
	// nightly-report reports.build 5s
	// "0 0 9 * * *" in Europe/Berlin
	// retry: 5 attempts, 5s up to 5m0s
	// catch-up: skip
}

func ExampleParseSubject() {
	for _, subj := range []string{
		"flyball.task.paused.poll-prices",
		"flyball.dispatch.poll-prices",
		"flyball.runtime.online.timer.timer-1",
		"flyball.task.paused.poll.prices",
	} {
		s, err := events.ParseSubject(subj)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Printf("family=%s action=%q kind=%q id=%s\n", s.Family, s.Action, s.Kind, s.ID)
	}
	// Output:
	// family=task action="paused" kind="" id=poll-prices
	// family=dispatch action="" kind="" id=poll-prices
	// family=runtime action="online" kind="timer" id=timer-1
	// error: subject "flyball.task.paused.poll.prices": task subjects have 4 tokens, got 5
}

// Validate reports every problem at once, each naming its field.
func ExampleTaskSpec_Validate() {
	spec := events.TaskSpec{
		ID:       "poll-prices",
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/prices"}},
		Schedule: events.Schedule{Interval: events.Duration(200 * time.Millisecond)},
	}
	fmt.Println(spec.Validate())

	spec.Jitter = 0.9
	for _, r := range events.Reasons(spec.Validate()) {
		fmt.Printf("%s -> %s\n", r.Field, r.Rule)
	}
	// Output:
	// schedule.interval: must be >= 1s, got 200ms
	// schedule.interval -> must be >= 1s, got 200ms
	// jitter -> must be in [0, 0.5], got 0.9
}
