package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestEnsureAtStartWarnsOfNewerDefinitions: serve and dev with
// --ensure-streams log each difference their ensure found. A stream whose
// definitions a newer binary recorded (a rolling upgrade) is left as it
// is and logged at warn, naming it and the version recorded, as the
// CHANGELOG says; provision's printed line is tested apart
// (TestProvisionLeavesNewerDefinitions).
func TestEnsureAtStartWarnsOfNewerDefinitions(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	st, err := srv.JS.Stream(ctx, streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Metadata = map[string]string{streams.MetadataVersion: "1000000"}
	if _, err := srv.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var diffs []streams.Difference
	if err := streams.Ensure(ctx, srv.JS, streams.WithReport(func(d streams.Difference) { diffs = append(diffs, d) })); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	logDifferences(slog.New(slog.NewTextHandler(&out, nil)), diffs)
	var warned bool
	for line := range strings.SplitSeq(out.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "newer definitions in place") &&
			strings.Contains(line, "object="+streams.StreamRuns) && strings.Contains(line, `recorded="version 1000000"`) {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("logged:\n%s\nwant a warn line naming %s and the recorded version 1000000", out.String(), streams.StreamRuns)
	}
	if st, err = srv.JS.Stream(ctx, streams.StreamRuns); err != nil {
		t.Fatal(err)
	}
	if v := st.CachedInfo().Config.Metadata[streams.MetadataVersion]; v != "1000000" {
		t.Fatalf("RUNS records definitions version %q after the ensure, want the newer 1000000 left as it was", v)
	}
}
