package main

import (
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestProvisionCreatesEverythingAndChangesNothingTheSecondTime runs
// `flyball provision` on an empty server, as the compose stack's
// provision container does: every stream, KV bucket and durable consumer
// exists afterwards, and a second run succeeds without storing or
// dropping a message.
func TestProvisionCreatesEverythingAndChangesNothingTheSecondTime(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListeningEmpty(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	if out := e.ok(t, "provision"); !strings.Contains(out, "provisioned:") {
		t.Fatalf("provision printed %q, want a line starting with provisioned:", out)
	}
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string]uint64{}
	for _, cfg := range cfgs {
		st, err := srv.JS.Stream(t.Context(), cfg.Name)
		if err != nil {
			t.Fatalf("stream %s after provision: %v", cfg.Name, err)
		}
		seqs[cfg.Name] = st.CachedInfo().State.LastSeq
	}
	durables, err := streams.ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for stream, cs := range durables {
		for _, c := range cs {
			if _, err := srv.JS.Consumer(t.Context(), stream, c.Durable); err != nil {
				t.Fatalf("durable %s on %s after provision: %v", c.Durable, stream, err)
			}
		}
	}
	e.ok(t, "provision")
	for _, cfg := range cfgs {
		st, err := srv.JS.Stream(t.Context(), cfg.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().State.LastSeq; got != seqs[cfg.Name] {
			t.Fatalf("stream %s: last sequence %d after the second provision, want %d", cfg.Name, got, seqs[cfg.Name])
		}
	}
}
