package jsutil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// OrderedInactiveThreshold is how long the server keeps a one-off read's
// ordered consumer that DeleteOrdered could not delete (nats.go's default
// is 5 minutes).
const OrderedInactiveThreshold = 30 * time.Second

// deleteOrderedTimeout bounds DeleteOrdered's request.
const deleteOrderedTimeout = 5 * time.Second

// DeleteOrdered deletes the consumer an ordered consumer cons of stream
// reads with now, once its reader is done with it (a Messages iterator
// stopped first, or its fetches over). nats.go deletes an ordered
// consumer's previous consumers when it replaces them, but never the
// last one: neither stopping its iterator nor dropping it deletes that,
// so each one-off read left a consumer on the stream until its inactive
// threshold. It runs even after ctx ended (a read cut short), with its
// own timeout. A consumer that is already gone is no error.
func DeleteOrdered(ctx context.Context, js jetstream.JetStream, stream string, cons jetstream.Consumer) error {
	info := cons.CachedInfo()
	if info == nil {
		return nil // never created
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteOrderedTimeout)
	defer cancel()
	if err := js.DeleteConsumer(ctx, stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete consumer %s of %s: %w", info.Name, stream, err)
	}
	return nil
}
