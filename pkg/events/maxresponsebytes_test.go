package events

import (
	"strings"
	"testing"
)

// TestExplicitZeroMaxResponseBytesIsRefused: docs/events.md gave
// maxResponseBytes the range [0, 10485760], but Normalize turned 0 into
// the default 102400 (and omitempty never stores a 0): a user setting 0
// to keep bodies out of RUNS had 100 KiB of each recorded. An explicit 0
// is now refused naming the field; leaving it out still means the default.
func TestExplicitZeroMaxResponseBytesIsRefused(t *testing.T) {
	t.Parallel()
	doc := func(mrb string) []byte {
		return []byte(`{"id":"t","schedule":{"interval":"1m"},"target":{"http":{"url":"https://example.com/"` + mrb + `}}}`)
	}
	for _, c := range []struct {
		mrb, want string
	}{
		{`,"maxResponseBytes":0`, "target.http.maxResponseBytes: must be in [1, 10485760], got 0"},
		{`,"maxResponseBytes":-1`, "target.http.maxResponseBytes: must be in [1, 10485760], got -1"},
		{`,"maxResponseBytes":1`, ""},
		{``, ""},
	} {
		var spec TaskSpec
		err := decodeStrict(doc(c.mrb), &spec)
		if err == nil {
			err = spec.Validate()
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", c.mrb, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: error %v, want one saying %q", c.mrb, err, c.want)
		}
	}
	// A stored spec never holds an explicit 0 (omitempty) and still
	// validates as stored with the field left out.
	spec := TaskSpec{ID: "t", Schedule: Schedule{Interval: Duration(60e9)}, Target: Target{HTTP: &HTTPTarget{URL: "https://example.com/"}}}
	if err := spec.ValidateStored(); err != nil {
		t.Errorf("a stored spec without maxResponseBytes: %v", err)
	}
}
