package events_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// benchRun is a realistic run.succeeded payload as the executor publishes
// it: an HTTP call with a small JSON response kept in Body (so the encoder
// has quotes to escape) and the governor's trail.
func benchRun() events.Run {
	scheduled := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	started := scheduled.Add(3 * time.Millisecond)
	return events.Run{
		DispatchID:  events.DispatchID("poll-prices-eu-west", scheduled),
		TaskID:      "poll-prices-eu-west",
		ScheduledAt: scheduled,
		Attempt:     1,
		StartedAt:   started,
		FinishedAt:  started.Add(182 * time.Millisecond),
		Duration:    events.Duration(182 * time.Millisecond),
		Status:      200,
		Body:        `{"prices":[{"sku":"A-100","eur":12.5},{"sku":"B-200","eur":7.25}]}`,
		Fingerprint: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Request: &events.RequestRecord{
			Method:  "GET",
			URL:     "https://prices.example.com/v1/eu-west/prices?currency=EUR",
			Headers: map[string]string{"Authorization": "[redacted]"},
		},
		Source: "adaptive",
		Trail:  []string{"baseline 30s", "adaptive: unchanged x3 -> 45s"},
	}
}

func benchDispatch() events.Dispatch {
	scheduled := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return events.Dispatch{
		DispatchID:  events.DispatchID("poll-prices-eu-west", scheduled),
		TaskID:      "poll-prices-eu-west",
		ScheduledAt: scheduled,
		FiredAt:     scheduled.Add(1200 * time.Microsecond),
		Source:      "adaptive",
	}
}

func benchRunBody(b *testing.B) []byte {
	b.Helper()
	run := benchRun()
	body, err := events.Marshal(events.TypeRunSucceeded, "flyball/executor/executor-1", run.TaskID, run, run.FinishedAt, run.DispatchID+"/1")
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkDecodeRun is the consumer hot path: decode a structured
// run.succeeded message and its data.
func BenchmarkDecodeRun(b *testing.B) {
	body := benchRunBody(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		e, err := events.Decode(nil, body)
		if err != nil {
			b.Fatal(err)
		}
		var run events.Run
		if err := events.DecodeData(e, &run); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRunEventOnly isolates Decode from DecodeData.
func BenchmarkDecodeRunEventOnly(b *testing.B) {
	body := benchRunBody(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.Decode(nil, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeDataRun isolates DecodeData.
func BenchmarkDecodeDataRun(b *testing.B) {
	e, err := events.Decode(nil, benchRunBody(b))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(e.Data())))
	b.ReportAllocs()
	for b.Loop() {
		var run events.Run
		if err := events.DecodeData(e, &run); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshalDispatch is the timer's hot path: one run.due per due task.
func BenchmarkMarshalDispatch(b *testing.B) {
	d := benchDispatch()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.Marshal(events.TypeRunDue, "flyball/timer/timer-1", d.TaskID, d, d.FiredAt, d.DispatchID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshalRun is the executor's hot path: one run.* per attempt.
func BenchmarkMarshalRun(b *testing.B) {
	run := benchRun()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.Marshal(events.TypeRunSucceeded, "flyball/executor/executor-1", run.TaskID, run, run.FinishedAt, run.DispatchID+"/1"); err != nil {
			b.Fatal(err)
		}
	}
}
