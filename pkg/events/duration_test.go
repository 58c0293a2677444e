package events

import (
	"encoding/json"
	"testing"
	"time"
)

// durationReference is the decoder before the fast path: a full JSON string
// decode, then time.ParseDuration.
func durationReference(b []byte) (time.Duration, bool) {
	if string(b) == "null" {
		return 0, true
	}
	var s string
	if json.Unmarshal(b, &s) != nil {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	return v, err == nil
}

// FuzzDurationJSON: the fast path accepts exactly what the reference
// accepts, with the same value, and Marshal round-trips.
func FuzzDurationJSON(f *testing.F) {
	for _, s := range []string{`"30s"`, `"1m30s"`, `"250ms"`, `"1.5h"`, `"-2µs"`, `"\u0033s"`, `"3\"s"`, `30`, `null`, `"x"`, `""`, `"\\"`, `{"a":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return // encoding/json never hands an invalid literal to UnmarshalJSON
		}
		var d Duration
		err := d.UnmarshalJSON(b)
		want, ok := durationReference(b)
		if (err == nil) != ok {
			t.Fatalf("UnmarshalJSON(%s): err %v, reference ok %v", b, err, ok)
		}
		if ok && d.D() != want {
			t.Fatalf("UnmarshalJSON(%s) = %v, reference %v", b, d.D(), want)
		}
		if !ok {
			return
		}
		out, err := d.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := json.Marshal(d.D().String())
		if string(out) != string(ref) {
			t.Fatalf("MarshalJSON(%v) = %s, encoding/json gives %s", d.D(), out, ref)
		}
	})
}
