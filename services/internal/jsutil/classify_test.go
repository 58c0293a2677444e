package jsutil

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestClassifyPublish(t *testing.T) {
	apiErr := func(status int, code jetstream.ErrorCode) error {
		return fmt.Errorf("publish x: %w", &jetstream.APIError{Code: status, ErrorCode: code, Description: "x"})
	}
	for _, c := range []struct {
		name      string
		duplicate bool
		err       error
		want      PublishResult
	}{
		{"stored", false, nil, Stored},
		{"duplicate PubAck", true, nil, Duplicate},
		{"10158 in process", false, apiErr(409, 10158), Duplicate},
		{"10077 subject full", false, apiErr(400, 10077), SubjectFull},
		{"other API error", false, apiErr(400, 10054), NotStored},
		{"ack timeout", false, ErrAckTimeout, NotStored},
		{"disconnected", false, nats.ErrDisconnected, NotStored},
		{"other", false, errors.New("boom"), NotStored},
	} {
		if got := ClassifyPublish(c.duplicate, c.err); got != c.want {
			t.Errorf("%s: ClassifyPublish(%t, %v) = %d, want %d", c.name, c.duplicate, c.err, got, c.want)
		}
	}
}
