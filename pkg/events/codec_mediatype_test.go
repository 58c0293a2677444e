package events_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestDataContentTypeIsAMediaType: datacontenttype names a media type,
// whose case does not matter and which is not a prefix.
func TestDataContentTypeIsAMediaType(t *testing.T) {
	spec := mustJSON(t, minimal)
	for _, ct := range []string{"application/jsonx", "application/json-patch", "text/plain"} {
		t.Run("structured "+ct, func(t *testing.T) {
			e, err := events.Decode(nil, envelope(envSpec, envID, envType, envSource, `"datacontenttype":"`+ct+`"`, `"data":`+string(spec)))
			if err != nil {
				t.Fatal(err)
			}
			_, err = events.DecodeTaskSpec(e)
			assertOneMalformed(t, err, wantErr{"datacontenttype", []string{"must be application/json", ct}})
		})
		t.Run("binary "+ct, func(t *testing.T) {
			_, err := events.DecodeTaskSpec(decodeBinaryAs(t, ct))
			assertOneMalformed(t, err, wantErr{"datacontenttype", []string{"must be application/json", ct}})
		})
	}
	for _, ct := range []string{"Application/JSON", "APPLICATION/JSON; charset=utf-8", "application/json;charset=UTF-8", "Application/Vnd.Flyball+JSON"} {
		t.Run("binary "+ct, func(t *testing.T) {
			if s, err := events.DecodeTaskSpec(decodeBinaryAs(t, ct)); err != nil || s.ID != "x" {
				t.Fatalf("DecodeTaskSpec = %q, %v", s.ID, err)
			}
		})
	}
	// Structured mode reads data as JSON for the media types binary mode
	// does: application/json and any +json type, in any case and with
	// parameters.
	for _, ct := range []string{"Application/JSON", "APPLICATION/JSON; charset=utf-8", "application/vnd.flyball.task+json", "Application/Vnd.Flyball+JSON; charset=utf-8"} {
		for _, extra := range []string{"", `"ext":"1"`} {
			members := []string{envSpec, envID, envType, envSource, `"datacontenttype":"` + ct + `"`, envData}
			if extra != "" {
				members = append(members, extra)
			}
			body := envelope(members...)
			t.Run("structured "+ct+extra, func(t *testing.T) {
				e, err := events.Decode(nil, body)
				if err != nil {
					t.Fatal(err)
				}
				if s, err := events.DecodeTaskSpec(e); err != nil || s.ID != "x" {
					t.Fatalf("DecodeTaskSpec = %q, %v", s.ID, err)
				}
				b, err := events.Encode(e)
				if err != nil {
					t.Fatal(err)
				}
				again, err := events.Decode(nil, b)
				if err != nil {
					t.Fatalf("re-decode of %s: %v", b, err)
				}
				var got, want bytes.Buffer
				if json.Compact(&got, again.Data()) != nil || json.Compact(&want, e.Data()) != nil || got.String() != want.String() {
					t.Fatalf("re-decoded data %s, want %s", again.Data(), e.Data())
				}
			})
		}
	}
	// A message refused for another attribute does not blame JSON data
	// under a JSON media type.
	for _, ct := range []string{"Application/JSON", "application/vnd.flyball.task+json"} {
		t.Run("structured bad time "+ct, func(t *testing.T) {
			_, err := events.Decode(nil, envelope(envSpec, envID, envType, envSource, `"time":"nope"`, `"datacontenttype":"`+ct+`"`, envData))
			assertOneMalformed(t, err, wantErr{"time", []string{"RFC 3339", "nope"}})
		})
	}
	t.Run("structured text/plain object data", func(t *testing.T) {
		_, err := events.Decode(nil, envelope(envSpec, envID, envType, envSource, `"datacontenttype":"text/plain"`, envData))
		assertOneMalformed(t, err, wantErr{"data", []string{"must be a JSON string", "text/plain"}})
	})
}

// decodeBinaryAs decodes the minimal binary-mode event with content type ct.
func decodeBinaryAs(t *testing.T, ct string) events.Event {
	t.Helper()
	h := binaryHeader()
	h["content-type"] = []string{ct}
	e, err := events.Decode(h, []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	return e
}
