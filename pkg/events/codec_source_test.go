package events_test

import (
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestDecodeBinaryNamesAnUnparsableSource: ce-source "::" is present but
// not a URI reference, as structured mode says.
func TestDecodeBinaryNamesAnUnparsableSource(t *testing.T) {
	h := binaryHeader()
	h["ce-source"] = []string{"::"}
	_, err := events.Decode(h, []byte(minimal))
	assertOneMalformed(t, err, wantErr{"source", []string{`must be a URI reference, got "::"`}})
}
