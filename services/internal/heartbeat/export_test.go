package heartbeat

import (
	"context"

	"github.com/flyballhq/flyball/pkg/events"
)

// BeatNow beats once, as the ticker would, after the loop's first try at
// the start's runtime.online (which it would otherwise race).
func (b *Beater) BeatNow(ctx context.Context) {
	<-b.tried
	b.beat(ctx)
}

// Tried waits for the loop's first try at the start's runtime.online.
func (b *Beater) Tried() { <-b.tried }

// Entry is the heartbeat the beater writes.
func (b *Beater) Entry() events.Heartbeat { return b.hb }
