package heartbeat

import (
	"context"

	"github.com/flyballhq/flyball/pkg/events"
)

// BeatNow beats once, as the ticker would.
func (b *Beater) BeatNow(ctx context.Context) { b.beat(ctx) }

// Entry is the heartbeat the beater writes.
func (b *Beater) Entry() events.Heartbeat { return b.hb }
