package events_test

import (
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestDecodeDataNamesANumberOutOfRange: a number past what its field
// holds has the right type; it is out of range.
func TestDecodeDataNamesANumberOutOfRange(t *testing.T) {
	base := `"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"30s"}`
	tests := []struct {
		name, data string
		want       wantErr
	}{
		{"float", `{` + base + `,"jitter":1e400}`, wantErr{"jitter", []string{"out of range", "1e400"}}},
		{"negative float", `{` + base + `,"jitter":-1e400}`, wantErr{"jitter", []string{"out of range", "-1e400"}}},
		{"integer", `{` + base + `,"catchUpMax":99999999999999999999}`, wantErr{"catchUpMax", []string{"out of range", "99999999999999999999"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s events.TaskSpec
			err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, tt.data), &s)
			assertOneMalformed(t, err, tt.want)
			for _, r := range events.Reasons(err) {
				if strings.Contains(r.Rule, "wrong type") {
					t.Errorf("rule %q says wrong type", r.Rule)
				}
			}
		})
	}
	// A fraction where an integer is wanted is still the wrong type.
	var s events.TaskSpec
	err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{`+base+`,"catchUpMax":1.5}`), &s)
	assertOneMalformed(t, err, wantErr{"catchUpMax", []string{"wrong type", "1.5"}})
}
