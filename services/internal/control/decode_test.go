package control_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
)

func TestDecodeSpecNamesEveryField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		given string
		want  []string // "field: rule fragment"
	}{
		{"valid", `{"id":"a","target":{"http":{"url":"http://x"}},"schedule":{"interval":"5s"}}`, nil},
		{"empty", ` `, []string{": empty document"}},
		{"not JSON", `{`, []string{": not valid JSON"}},
		{"not UTF-8", "{\"id\":\"caf\xe9\"}", []string{"id: not valid UTF-8 (byte 0xE9 at offset 3)"}},
		{"unknown field", `{"id":"a","colour":"red"}`, []string{"colour: unknown field"}},
		{"wrong type", `{"id":"a","schedule":{"interval":5}}`, []string{"schedule.interval: wrong type"}},
		{
			// The shape's problems together; the values' rules once it decodes.
			"every shape problem", `{"id":"a","colour":"red","schedule":{"interval":"5 parsecs"},"startAt":"noon","target":{"http":{"url":"ftp://x"}}}`,
			[]string{"colour: unknown field", "schedule.interval: wrong type", "startAt: must be an RFC 3339 time"},
		},
		{
			"every reason", `{"id":"a.b","target":{"http":{"url":"ftp://x"}},"schedule":{"interval":"10ms"}}`,
			[]string{"id: must be 1-128", "target.http.url: scheme", "schedule.interval: must be >= 1s"},
		},
	}
	for _, c := range cases {
		_, err := control.DecodeSpec([]byte(c.given))
		reasons := events.Reasons(err)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want nil", c.name, err)
			}
			continue
		}
		if len(reasons) != len(c.want) {
			t.Errorf("%s: reasons %+v, want %d", c.name, reasons, len(c.want))
			continue
		}
		for i, w := range c.want {
			field, rule, _ := strings.Cut(w, ": ")
			if reasons[i].Field != field || !strings.Contains(reasons[i].Rule, rule) {
				t.Errorf("%s: reason %d = %+v, want field %q with %q", c.name, i, reasons[i], field, rule)
			}
		}
	}
}

func TestValidateHint(t *testing.T) {
	t.Parallel()
	at := time.Now()
	cases := []struct {
		name      string
		given     events.TaskHint
		wantField string
	}{
		{"interval", events.TaskHint{Interval: events.Duration(30 * time.Second)}, ""},
		{"one-shot", events.TaskHint{At: &at, TTL: events.Duration(time.Hour)}, ""},
		{"neither", events.TaskHint{}, "interval"},
		{"too fast", events.TaskHint{Interval: events.Duration(time.Millisecond)}, "interval"},
		{"ttl too long", events.TaskHint{At: &at, TTL: events.Duration(200 * time.Hour)}, "ttl"},
		{"bad id", events.TaskHint{ID: "a b", At: &at}, "id"},
		// 10000-01-01T00:30:00Z in UTC: a decision holding it cannot be stored.
		{"reason too long", events.TaskHint{At: &at, Reason: strings.Repeat("x", events.MaxReasonBytes+1)}, "reason"},
		{"reason at the limit", events.TaskHint{At: &at, Reason: strings.Repeat("x", events.MaxReasonBytes)}, ""},
		{"at past year 9999", events.TaskHint{At: new(time.Date(9999, 12, 31, 23, 30, 0, 0, time.FixedZone("", -3600)))}, "at"},
	}
	for _, c := range cases {
		err := control.ValidateHint(&c.given)
		switch {
		case c.wantField == "" && err != nil:
			t.Errorf("%s: %v, want nil", c.name, err)
		case c.wantField != "" && (err == nil || events.Reasons(err)[0].Field != c.wantField):
			t.Errorf("%s: %v, want a reason naming %q", c.name, err, c.wantField)
		}
	}
}

// TestValidatePause: a pause's reason is kept in the schedule and the
// pause hint, so it is bounded like a hint's; an until past year 9999 (in
// UTC) could not be stored.
func TestValidatePause(t *testing.T) {
	t.Parallel()
	past := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	late := time.Date(9999, 12, 31, 23, 30, 0, 0, time.FixedZone("", -3600))
	cases := []struct {
		name      string
		given     events.TaskPause
		wantField string
	}{
		{"indefinite", events.TaskPause{Reason: "deploy"}, ""},
		{"until in the past ends at once", events.TaskPause{Until: &past}, ""},
		{"reason at the limit", events.TaskPause{Reason: strings.Repeat("x", events.MaxReasonBytes)}, ""},
		{"reason too long", events.TaskPause{Reason: strings.Repeat("x", events.MaxReasonBytes+1)}, "reason"},
		{"until past year 9999", events.TaskPause{Until: &late}, "until"},
	}
	for _, c := range cases {
		err := control.ValidatePause(&c.given)
		switch {
		case c.wantField == "" && err != nil:
			t.Errorf("%s: %v, want nil", c.name, err)
		case c.wantField != "" && (err == nil || events.Reasons(err)[0].Field != c.wantField):
			t.Errorf("%s: %v, want a reason naming %q", c.name, err, c.wantField)
		}
	}
}

// TestRunNowIsAOneShotHintAtNow: run-now's at is the zero time, the
// governor's now (the time TASKS stored it), not the sender's clock.
func TestRunNowIsAOneShotHintAtNow(t *testing.T) {
	t.Parallel()
	h := control.RunNow("a", 0, "")
	if h.ID != "a" || h.At == nil || !h.At.IsZero() || h.Reason != "run-now" || h.Interval != 0 {
		t.Fatalf("RunNow = %+v", h)
	}
	if err := control.ValidateHint(&h); err != nil {
		t.Fatal(err)
	}
}

func TestValidateReason(t *testing.T) {
	t.Parallel()
	if err := control.ValidateReason(strings.Repeat("x", events.MaxReasonBytes)); err != nil {
		t.Fatalf("reason at the limit: %v, want nil", err)
	}
	err := control.ValidateReason(strings.Repeat("x", events.MaxReasonBytes+1))
	if rs := events.Reasons(err); len(rs) != 1 || rs[0].Field != "reason" {
		t.Fatalf("reason too long: %v, want one problem naming reason", err)
	}
}
