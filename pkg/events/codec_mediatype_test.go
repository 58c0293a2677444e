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
	for _, ct := range []string{"Application/JSON", "APPLICATION/JSON; charset=utf-8"} {
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
