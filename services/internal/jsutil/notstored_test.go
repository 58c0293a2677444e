package jsutil

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNotStored: a publish the server answered with an error, that no
// stream took or that was never sent (a connection disconnected with no
// reconnect buffer fails it at once) is not stored; one whose ack timed
// out or was lost with the connection may be, and so is a duplicate being
// stored right now (10158). The timer dates a dispatch's lateness by the
// first try that may be stored, and control answers "may be stored" on
// the same test.
func TestNotStored(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{ErrAckTimeout, false},
		{jetstream.ErrAsyncPublishTimeout, false},
		{nats.ErrConnectionClosed, false},
		{nats.ErrTimeout, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10158, Description: "duplicate message id is in process"}, false},
		{fmt.Errorf("wrapped: %w", &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}), true},
		{jetstream.ErrStreamMessageExceedsMaximum, true},
		{jetstream.ErrNoStreamResponse, true},
		{nats.ErrNoResponders, true},
		{nats.ErrMaxPayload, true},
		{fmt.Errorf("publish x: %w", nats.ErrReconnectBufExceeded), true},
		{nats.ErrConnectionDraining, true},
	} {
		if got := NotStored(c.err); got != c.want {
			t.Errorf("NotStored(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestReconnecting: a publish that met the connection down while nats.go
// reconnects (never sent, with no reconnect buffer; or its ack cut off by
// the disconnect) is worth publishing again once it is back; a closed
// connection, a timeout or a refusal is not that.
func TestReconnecting(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("publish x: %w", nats.ErrReconnectBufExceeded), true},
		{nats.ErrDisconnected, true},
		{nats.ErrConnectionReconnecting, true},
		{nats.ErrConnectionClosed, false},
		{nats.ErrConnectionDraining, false},
		{ErrAckTimeout, false},
		{jetstream.ErrNoStreamResponse, false},
	} {
		if got := Reconnecting(c.err); got != c.want {
			t.Errorf("Reconnecting(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
