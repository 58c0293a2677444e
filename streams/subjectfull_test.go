package streams

import (
	"errors"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// TestIsSubjectFullOnlyForTheSubjectLimit: error 10077 is nats-server's
// "store failed", whatever the cause. Only DISPATCH's per-subject limit
// (one pending run per task) means the task's subject holds a dispatch;
// a stream-wide limit (max_msgs, max_bytes) refuses a task with nothing
// pending, and is a failure to store like any other.
func TestIsSubjectFullOnlyForTheSubjectLimit(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)
	if got, want := maxMsgsPerSubject, server.ErrMaxMsgsPerSubject.Error(); got != want {
		t.Fatalf("maxMsgsPerSubject %q, want nats-server's ErrMaxMsgsPerSubject %q", got, want)
	}
	if _, err := js.Publish(ctx, "flyball.dispatch.t1", []byte("run-1")); err != nil {
		t.Fatal(err)
	}
	storeFailed := func(what string, err error) {
		t.Helper()
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10077 {
			t.Fatalf("%s: %v, want error 10077", what, err)
		}
	}

	_, err := js.Publish(ctx, "flyball.dispatch.t1", []byte("run-2"))
	storeFailed("t1's second dispatch", err)
	if !IsSubjectFull(err) {
		t.Errorf("t1's second dispatch: IsSubjectFull(%v) false, want true", err)
	}

	editStream(t, js, StreamDispatch, func(c *jetstream.StreamConfig) { c.MaxMsgs = 1 })
	_, err = js.Publish(ctx, "flyball.dispatch.t2", []byte("run-1"))
	storeFailed("t2's dispatch, DISPATCH at max_msgs", err)
	if IsSubjectFull(err) {
		t.Errorf("t2's dispatch, DISPATCH at max_msgs: IsSubjectFull(%v) true, want false: t2 has nothing pending", err)
	}

	editStream(t, js, StreamDispatch, func(c *jetstream.StreamConfig) { c.MaxMsgs, c.MaxBytes = -1, 1 })
	_, err = js.Publish(ctx, "flyball.dispatch.t2", []byte("run-1"))
	storeFailed("t2's dispatch, DISPATCH at max_bytes", err)
	if IsSubjectFull(err) {
		t.Errorf("t2's dispatch, DISPATCH at max_bytes: IsSubjectFull(%v) true, want false: t2 has nothing pending", err)
	}

	if IsSubjectFull(errors.New("maximum messages per subject exceeded")) {
		t.Error("IsSubjectFull true for an error that is not JetStream's")
	}
}
