package streams

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestEnsureRacingCreateKeepsTheOtherCreators is two ensures racing on a
// new server: this one finds RUNS and RUNS.breaker absent and plans the
// definitions (1 replica, the files' limits and version); before it
// writes them, another process creates both its own way (here: RUNS
// with a 72h max age, as a --replicas 3 provision creates it at R3, and
// the consumer under newer definitions). Ensure used to write its plan
// over them (CreateOrUpdate), scaling a cluster's new stream down to 1
// replica; it now creates a stream or consumer it found absent with a
// create-only call, and when that finds it created, reads it again and
// plans from what it finds (its replicas and limits kept, newer
// definitions left as they are).
//
// The hooks are package variables that every Ensure calls, so this test
// is not parallel: the parallel tests wait until it is done.
func TestEnsureRacingCreateKeepsTheOtherCreators(t *testing.T) {
	ctx := testCtx(t)
	js := startJS(t)
	defs, err := StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	runs := defs[slices.IndexFunc(defs, func(c jetstream.StreamConfig) bool { return c.Name == StreamRuns })]
	runs.MaxAge = 72 * time.Hour
	ccs, err := ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	breaker := ccs[StreamRuns][slices.IndexFunc(ccs[StreamRuns], func(c jetstream.ConsumerConfig) bool { return c.Durable == ConsumerBreaker })]
	breaker.AckWait = time.Minute
	breaker.Metadata = map[string]string{MetadataVersion: "1000000"}

	testHookPlanned = func() {
		if _, err := js.CreateStream(ctx, runs); err != nil {
			t.Errorf("the other process's create of RUNS: %v", err)
		}
	}
	testHookConsumerRead = func(stream, name string) {
		if stream != StreamRuns || name != ConsumerBreaker {
			return
		}
		if _, err := js.CreateConsumer(ctx, stream, breaker); err != nil {
			t.Errorf("the other process's create of RUNS.breaker: %v", err)
		}
	}
	t.Cleanup(func() { testHookPlanned, testHookConsumerRead = nil, nil })

	var report []string
	mustEnsureReport(t, js, &report)
	if got := streamCfg(t, js, StreamRuns).MaxAge; got != 72*time.Hour {
		t.Errorf("RUNS max_age %v, want the 72h of the process that created it first", got)
	}
	if got := consumerCfg(t, js, StreamRuns, ConsumerBreaker); got.AckWait != time.Minute || got.Metadata[MetadataVersion] != "1000000" {
		t.Errorf("RUNS.breaker ack_wait %v metadata %v, want the newer definitions' 1m and version 1000000", got.AckWait, got.Metadata)
	}
	for _, w := range []string{
		"RUNS: max_age 72h kept (flyball's default is 168h)",
		"RUNS.breaker: newer definitions in place (version 1000000), left as they are",
	} {
		if !slices.Contains(report, w) {
			t.Errorf("report %q lacks %q", report, w)
		}
	}
}
