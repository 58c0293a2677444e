package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// puller fetches a consumer's messages in batches into msgs, for workers
// to take.
type puller struct {
	msgs chan jetstream.Msg
	// route, if set, picks the channel for a message instead of msgs.
	route       func(jetstream.Msg) chan<- jetstream.Msg
	received    atomic.Int64
	fetchErrors atomic.Int64
}

// fetch pulls messages in batches of up to batch and hands them to the
// workers until ctx ends. Fetch in a loop rather than Consume: with
// Consume on an in-process connection the pull occasionally stalled
// silently for up to its 30s expiry under load (nats.go v1.55.0), which
// measured the client, not the system. A fetch expires after a second at
// worst.
func (p *puller) fetch(ctx context.Context, cons jetstream.Consumer, batch int) {
	for ctx.Err() == nil {
		b, err := cons.Fetch(batch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			p.fetchErrors.Add(1)
			continue
		}
		for m := range b.Messages() {
			p.received.Add(1)
			var out chan<- jetstream.Msg = p.msgs
			if p.route != nil {
				out = p.route(m)
			}
			select {
			case out <- m:
			case <-ctx.Done():
				return
			}
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			p.fetchErrors.Add(1)
		}
	}
}
