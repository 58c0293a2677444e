package lifecycle

import "time"

// SetDrainTimeout shortens the drain deadline for a test.
func (b *Base) SetDrainTimeout(d time.Duration) { b.drainTimeout = d }
