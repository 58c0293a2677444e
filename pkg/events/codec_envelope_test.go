package events_test

import (
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// envelope is a structured-mode task.created message built from its
// members in order, so that a test can repeat one or write bytes that are
// not UTF-8.
func envelope(members ...string) []byte {
	return []byte("{" + strings.Join(members, ",") + "}")
}

var (
	envSpec    = `"specversion":"1.0"`
	envID      = `"id":"c1"`
	envSource  = `"source":"cli/alice"`
	envType    = `"type":"io.flyball.task.created"`
	envSubject = `"subject":"x"`
	envData    = `"data":` + minimal
)

// TestDecodeRefusesRepeatedAttributes: the sdk keeps the last of a
// repeated attribute, so a task.deleted could be applied as a create and
// a command answered under another id. Each attribute appears once.
func TestDecodeRefusesRepeatedAttributes(t *testing.T) {
	tests := []struct {
		name, field string
		body        []byte
	}{
		{"type", "type", envelope(envSpec, `"type":"io.flyball.task.deleted"`, envID, envSource, envSubject, envType, envData)},
		{"id", "id", envelope(envSpec, envID, envType, envSource, envSubject, `"id":"c2"`, envData)},
		{"data", "data", envelope(envSpec, envID, envType, envSource, envSubject, `"data":{"id":"x"}`, envData)},
		{"subject", "subject", envelope(envSpec, envID, envType, envSource, envSubject, `"subject":"y"`, envData)},
		{"source", "source", envelope(envSpec, envID, envType, envSource, `"source":"cli/bob"`, envData)},
		{"time", "time", envelope(envSpec, envID, envType, envSource, `"time":"2026-03-01T12:00:00Z"`, `"time":"2026-03-01T12:00:00Z"`, envData)},
		{"escaped key", "id", envelope(envSpec, envID, envType, envSource, `"\u0069d":"c2"`, envData)},
		{"extension", "traceparent", envelope(envSpec, envID, envType, envSource, `"traceparent":"a"`, `"traceparent":"b"`, envData)},
		{"with an extension", "type", envelope(envSpec, `"ext":"1"`, `"type":"io.flyball.task.deleted"`, envID, envSource, envType, envData)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := events.Decode(nil, tt.body)
			if err == nil {
				t.Fatalf("Decode(%s) = event type %q id %q subject %q data %s, want an error", tt.body, e.Type(), e.ID(), e.Subject(), e.Data())
			}
			assertOneMalformed(t, err, wantErr{tt.field, []string{"given twice: each attribute appears once"}})
		})
	}
}

// TestDecodeRefusesAttributesThatAreNotUTF8: a JSON decoder replaces such
// bytes with U+FFFD, so an answer named another command id. The UTF-8 rule
// of data holds for the envelope too.
func TestDecodeRefusesAttributesThatAreNotUTF8(t *testing.T) {
	tests := []struct {
		name, field string
		body        []byte
	}{
		{"id", "id", envelope(envSpec, "\"id\":\"c\xff\"", envType, envSource, envSubject, envData)},
		{"type", "type", envelope(envSpec, envID, "\"type\":\"io.flyball.task.created\xe9\"", envSource, envData)},
		{"source", "source", envelope(envSpec, envID, envType, "\"source\":\"cli/\xe9\"", envData)},
		{"subject", "subject", envelope(envSpec, envID, envType, envSource, "\"subject\":\"x\xc3\"", envData)},
		{"id with an escape", "id", envelope(envSpec, "\"id\":\"c\\n\xff\"", envType, envSource, envData)},
		{"extension", "ext", envelope(envSpec, envID, envType, envSource, "\"ext\":\"\xff\"", envData)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := events.Decode(nil, tt.body)
			if err == nil {
				t.Fatalf("Decode(%q) = event id %q type %q source %q subject %q, want an error", tt.body, e.ID(), e.Type(), e.Source(), e.Subject())
			}
			assertOneMalformed(t, err, wantErr{tt.field, []string{"not valid UTF-8", "JSON text must be UTF-8"}})
		})
	}
	// Valid UTF-8 and escapes stay accepted.
	e, err := events.Decode(nil, envelope(envSpec, `"id":"c-é\u00e9"`, envType, envSource, envData))
	if err != nil || e.ID() != "c-éé" {
		t.Fatalf("Decode of a UTF-8 id = %q, %v; want c-éé", e.ID(), err)
	}
}

// A structured-mode envelope with several bad attributes was refused
// naming only the first the sdk tripped on: source "::" and time
// "yesterday" reported source alone. Every problem is listed, in
// document order.
func TestDecodeStructuredListsEveryEnvelopeProblem(t *testing.T) {
	body := `{"specversion":"1.0","id":"c-1","source":"::","type":"io.flyball.task.created","time":"yesterday","x-foo":"v","data":{}}`
	_, err := events.Decode(nil, []byte(body))
	rs := events.Reasons(err)
	if len(rs) != 3 || rs[0].Field != "source" || rs[1].Field != "time" || rs[2].Field != "x-foo" {
		t.Fatalf("reasons %+v, want source, time and x-foo", rs)
	}

	// A missing id or type is named too, after them.
	body = `{"specversion":"1.0","source":"::","type":" ","data":{}}`
	_, err = events.Decode(nil, []byte(body))
	rs = events.Reasons(err)
	if len(rs) != 3 || rs[0].Field != "source" || rs[1].Field != "id" || rs[2].Field != "type" || rs[2].Rule != "is required" {
		t.Fatalf("reasons %+v, want source, then id and type required", rs)
	}
}
