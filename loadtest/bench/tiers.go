package bench

import (
	"context"
	"log/slog"
	"time"
)

// Tier names.
const (
	TierW1a    = "w1a"
	TierW1b    = "w1b"
	TierW1c    = "w1c"
	TierW1d    = "w1d"
	TierStress = "stress"
	TierPeak   = "peak"
	TierScale  = "scale"
	TierSmoke  = "smoke"
)

// Kinds of tier.
const (
	// KindRuns creates tasks and measures their runs.
	KindRuns = "runs"
	// KindPeak offers more runs than flyball can serve and measures how
	// many it completes; only flyball runs it.
	KindPeak = "peak"
	// KindScale loads schedules into the timer and measures time and
	// memory; nothing runs.
	KindScale = "scale"
)

// Tier is one workload.
type Tier struct {
	Name     string        `json:"name"`
	Title    string        `json:"title"`
	Kind     string        `json:"kind"`
	Tasks    int           `json:"tasks"`
	Interval time.Duration `json:"interval"`
}

// tiers is the table, plus Peak (the throughput ceiling) and Smoke
// (the CI check).
var tiers = []Tier{
	{Name: TierW1a, Title: "W1a 100 tasks @1s", Kind: KindRuns, Tasks: 100, Interval: time.Second},
	{Name: TierW1b, Title: "W1b 1,000 tasks @10s", Kind: KindRuns, Tasks: 1000, Interval: 10 * time.Second},
	{Name: TierW1c, Title: "W1c 1,000 tasks @1s", Kind: KindRuns, Tasks: 1000, Interval: time.Second},
	{Name: TierW1d, Title: "W1d 10,000 tasks @60s", Kind: KindRuns, Tasks: 10_000, Interval: time.Minute},
	{Name: TierStress, Title: "Stress 10,000 tasks @1s", Kind: KindRuns, Tasks: 10_000, Interval: time.Second},
	{Name: TierPeak, Title: "Peak (raw msg/s ÷ 3) tasks @1s", Kind: KindPeak, Interval: time.Second},
	{Name: TierScale, Title: "Scale 1,000,000 tasks @1h", Kind: KindScale, Tasks: 1_000_000, Interval: time.Hour},
	{Name: TierSmoke, Title: "Smoke 20 tasks @1s", Kind: KindRuns, Tasks: 20, Interval: time.Second},
}

// TierNames lists every tier name.
func TierNames() []string {
	out := make([]string, len(tiers))
	for i, t := range tiers {
		out[i] = t.Name
	}
	return out
}

// DefaultTiers is what `make bench` runs: every tier but Smoke.
func DefaultTiers() []string {
	return []string{TierW1a, TierW1b, TierW1c, TierW1d, TierStress, TierPeak, TierScale}
}

func lookupTier(name string) (Tier, bool) {
	for _, t := range tiers {
		if t.Name == name {
			return t, true
		}
	}
	return Tier{}, false
}

// levelHandler drops records below min.
type levelHandler struct {
	min slog.Level
	slog.Handler
}

func (h levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return levelHandler{h.min, h.Handler.WithAttrs(as)}
}

func (h levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{h.min, h.Handler.WithGroup(name)}
}
