package jsutil

import (
	"context"
	"errors"
	"testing"
)

// TestAWatchClosedByItsContextSaysTheContextEnded: nats.go stops a KV
// watch when the context it was started with ends, closing its updates,
// and a reader's select (query's eachEntry and keysAfter, the sweeper's
// compaction) can take that closed channel before ctx.Done(). They said
// "watch closed", which hid the deadline from errors.Is and told an
// operator the server had cut the watch off.
// A watch closed while its context is live still says "watch closed".
func TestAWatchClosedByItsContextSaysTheContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := WatchClosed(ctx, "read KV flyball-tasks")
	if !errors.Is(err, context.Canceled) || err.Error() != "read KV flyball-tasks: context canceled" {
		t.Errorf("watch closed after its context was cancelled: %v, want read KV flyball-tasks: context canceled", err)
	}
	err = WatchClosed(t.Context(), "list keys of KV flyball-tasks")
	if errors.Is(err, context.Canceled) || err.Error() != "list keys of KV flyball-tasks: watch closed" {
		t.Errorf("watch closed with its context live: %v, want list keys of KV flyball-tasks: watch closed", err)
	}
}
