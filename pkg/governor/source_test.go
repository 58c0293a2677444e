package governor_test

import (
	"testing"

	"github.com/flyballhq/flyball/pkg/governor"
)

// TestSourceCadence: exactly the sources of the task's own interval
// cadence are cadence slots; every other source (and none) is not.
func TestSourceCadence(t *testing.T) {
	cadence := map[governor.Source]bool{
		governor.SourceBaselineInterval: true, governor.SourceAdaptiveTighten: true, governor.SourceAdaptiveRelax: true,
		governor.SourceActivityIdle: true, governor.SourceActivityDormant: true,
		governor.SourceClampedMin: true, governor.SourceClampedMax: true,
	}
	for _, s := range append(governor.AllSources(), "", "unknown") {
		if got := s.Cadence(); got != cadence[s] {
			t.Errorf("Source(%q).Cadence() = %v, want %v", s, got, cadence[s])
		}
	}
}
