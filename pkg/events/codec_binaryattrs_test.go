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

// A binary-mode envelope with several bad attributes was refused naming
// only the first: ce-source "::" and ce-time "yesterday" reported
// source alone, so a sender fixed one and sent again to learn of the
// other. Every problem of the envelope is listed, by attribute name.
func TestDecodeBinaryListsEveryEnvelopeProblem(t *testing.T) {
	h := binaryHeader()
	h["ce-source"] = []string{"::"}
	h["ce-time"] = []string{"yesterday"}
	_, err := events.Decode(h, []byte(minimal))
	rs := events.Reasons(err)
	if len(rs) != 2 || rs[0].Field != "source" || rs[1].Field != "time" {
		t.Fatalf("reasons %+v, want source and time", rs)
	}

	h = binaryHeader()
	h["ce-type"] = []string{"io.flyball.task.deleted", "io.flyball.task.created"}
	h["ce-id"] = []string{"c\xff"}
	h["content-type"] = []string{events.ContentTypeJSON}
	_, err = events.Decode(h, []byte(`{bad`))
	rs = events.Reasons(err)
	if len(rs) != 3 || rs[0].Field != "data" || rs[1].Field != "id" || rs[2].Field != "type" {
		t.Fatalf("reasons %+v, want data, id and type", rs)
	}

	h = binaryHeader()
	delete(h, "ce-id")
	h["ce-source"] = []string{"::"}
	_, err = events.Decode(h, []byte(minimal))
	rs = events.Reasons(err)
	if len(rs) != 2 || rs[0].Field != "id" || rs[1].Field != "source" || rs[1].Rule == "is required" {
		t.Fatalf("reasons %+v, want id required and source not a URI reference", rs)
	}
}
