package heartbeat

import "context"

// BeatNow beats once, as the ticker would.
func (b *Beater) BeatNow(ctx context.Context) { b.beat(ctx) }
