package query

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// Instance is one service instance in the runtime registry (KV
// flyball-runtime).
type Instance struct {
	// Key is the KV key, <kind>.<name>.
	Key string `json:"key"`
	events.Heartbeat
	// LastBeatAge is how long ago the instance last beat: since StoredAt
	// (lastSeen), as its status judges it, so a clock ahead shows no
	// negative age and one behind no inflated one; for an entry the
	// sweeper marked offline, since LastBeat (StoredAt is the mark's).
	// Never negative.
	LastBeatAge events.Duration `json:"lastBeatAge"`
	// StoredAt is when NATS stored the entry, by the server's clock: an
	// instance whose clock is off stamps lastBeat off by as much.
	StoredAt time.Time `json:"storedAt"`
}

// Runtime lists the registered service instances, by kind then name.
// Instances that stopped cleanly deregistered themselves; the sweeper marks
// those that stopped beating offline. An instance silent for three beats
// is listed offline before the sweeper marks it (or with no sweeper
// running), as Health counts it: its entry still says online.
func (r *Reader) Runtime(ctx context.Context) ([]Instance, error) {
	beats, raw, err := decodeEntries[events.Heartbeat](ctx, r.runtime)
	if err != nil {
		return nil, err
	}
	now := r.now()
	out := make([]Instance, 0, len(beats))
	for key, hb := range beats {
		in := Instance{Key: key, Heartbeat: hb, StoredAt: raw[key].Created().UTC()}
		in.LastBeatAge = events.Duration(max(0, now.Sub(in.lastSeen())))
		if !online(&in, now) {
			in.Status = events.RuntimeOffline
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Instance) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}
