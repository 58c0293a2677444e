package events_test

import (
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// Binary mode took the first of a repeated ce-* header and passed
// attribute values that are not UTF-8: two ce-type headers applied
// whichever came first, and a ce-id of "c\xff" came back in the answer as
// "c\uFFFD", an id the sender could not match. Structured mode refuses
// both; binary mode now does too.
func TestDecodeBinaryRefusesRepeatedAndNonUTF8Attributes(t *testing.T) {
	h := binaryHeader()
	h["ce-type"] = []string{"io.flyball.task.deleted", "io.flyball.task.created"}
	_, err := events.Decode(h, []byte(minimal))
	assertOneMalformed(t, err, wantErr{"type", []string{"given twice: each attribute appears once"}})

	h = binaryHeader()
	h["Ce-Id"] = []string{"c2"}
	_, err = events.Decode(h, []byte(minimal))
	assertOneMalformed(t, err, wantErr{"id", []string{"given twice: each attribute appears once"}})

	h = binaryHeader()
	h["ce-id"] = []string{"c\xff"}
	_, err = events.Decode(h, []byte(minimal))
	assertOneMalformed(t, err, wantErr{"id", []string{"not valid UTF-8"}})
}
