package timer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// checkDecode compares decodeSchedule with a full json.Unmarshal of the
// gov.State: the same error-ness, nextRunAt and source.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	var full gov.State
	wantErr := json.Unmarshal(b, &full)
	sc, err := decodeSchedule(b)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decodeSchedule(%s): err %v, json.Unmarshal err %v", b, err, wantErr)
	}
	if err != nil {
		return
	}
	if !sc.next.Equal(full.NextRunAt) || sc.next.IsZero() != full.NextRunAt.IsZero() {
		t.Fatalf("decodeSchedule(%s): nextRunAt %v, want %v", b, sc.next, full.NextRunAt)
	}
	if string(sc.source) != string(full.Source) {
		t.Fatalf("decodeSchedule(%s): source %q, want %q", b, sc.source, full.Source)
	}
	if !sc.created.Equal(full.CreatedAt) || sc.created.IsZero() != full.CreatedAt.IsZero() {
		t.Fatalf("decodeSchedule(%s): createdAt %v, want %v", b, sc.created, full.CreatedAt)
	}
}

// testSpecs are tasks that exercise most of the governor's rules.
func testSpecs(t *testing.T, start time.Time) []events.TaskSpec {
	t.Helper()
	recheck := events.Duration(10 * time.Minute)
	specs := []events.TaskSpec{
		{ID: "every-minute", Schedule: events.Schedule{Interval: events.Duration(time.Minute)}},
		{ID: "cron-berlin", Schedule: events.Schedule{Cron: "*/5 * * * *", Timezone: "Europe/Berlin"}},
		{ID: "start-at", Schedule: events.Schedule{Interval: events.Duration(time.Hour)}, StartAt: &start},
		{
			ID:         "kitchen-sink_1",
			Schedule:   events.Schedule{Interval: events.Duration(10 * time.Second)},
			Jitter:     0.1,
			Bounds:     &events.Bounds{Min: events.Duration(5 * time.Second), Max: events.Duration(time.Hour)},
			Adaptive:   &events.Adaptive{Mode: events.AdaptiveChange},
			Activity:   &events.Activity{IdleAfter: events.Duration(time.Hour), DormantAfter: events.Duration(24 * time.Hour)},
			QuietHours: &events.QuietHours{Start: "22:00", End: "06:00", Timezone: "UTC", Interval: events.Duration(time.Hour)},
			Budget:     &events.Budget{MaxRunsPerDay: 100},
			Breaker:    &events.BreakerPolicy{},
			CatchUp:    events.CatchUpAll,
			DeadLetter: &events.DeadLetterPolicy{RecheckAfter: recheck},
		},
	}
	for i := range specs {
		specs[i].Target = events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/" + specs[i].ID}}
		if err := specs[i].Validate(); err != nil {
			t.Fatalf("spec %s: %v", specs[i].ID, err)
		}
		specs[i].Normalize()
	}
	return specs
}

// governorStates runs tasks through random sequences of every input kind
// and returns each state the governor would store.
func governorStates(t *testing.T, seed uint64, steps int) []gov.State {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	reasons := []string{"", "maintenance", `quote " and \ backslash`, "<b>&amp;</b>", "naïve ünïcode ✓", "line\nbreak\ttab", "\u2028"}
	var out []gov.State
	for _, spec := range testSpecs(t, now.Add(90*time.Second)) {
		st := gov.Decide(now, &spec, gov.State{}, gov.Input{Kind: gov.KindAccepted}).State
		out = append(out, st)
		at := now
		for range steps {
			// Mostly run the slot that is due; sometimes something else
			// happens first.
			if !st.NextRunAt.IsZero() && r.IntN(3) > 0 {
				at = st.NextRunAt.Add(time.Duration(r.IntN(2000)) * time.Millisecond)
			} else {
				at = at.Add(time.Duration(r.IntN(3600)) * time.Second)
			}
			var in gov.Input
			switch r.IntN(12) {
			case 0:
				in = gov.Input{Kind: gov.KindPaused, Pause: &gov.Pause{Reason: reasons[r.IntN(len(reasons))]}}
				if r.IntN(2) == 0 {
					in.Pause.Until = at.Add(time.Duration(r.IntN(7200)) * time.Second)
				}
			case 1:
				in = gov.Input{Kind: gov.KindResumed}
			case 2:
				h := &gov.Hint{Reason: reasons[r.IntN(len(reasons))]}
				if r.IntN(2) == 0 {
					h.Interval = time.Duration(1+r.IntN(600)) * time.Second
				} else {
					h.At = at.Add(time.Duration(r.IntN(600)) * time.Second)
				}
				in = gov.Input{Kind: gov.KindHinted, Hint: h}
			case 3:
				states := []string{"open", "half-open", "closed"}
				in = gov.Input{Kind: gov.KindBreaker, Breaker: &gov.BreakerSignal{State: states[r.IntN(3)], RetryAt: at.Add(time.Minute)}}
			case 4:
				in = gov.Input{Kind: gov.KindDeadLettered, DeadLetter: &gov.DeadLetterSignal{
					DispatchID: events.DispatchID(spec.ID, st.NextRunAt), Reason: reasons[r.IntN(len(reasons))], At: at,
				}}
			case 5:
				in = gov.Input{Kind: gov.KindRequeued}
			case 6:
				in = gov.Input{Kind: gov.KindUpdated}
			case 7:
				if r.IntN(4) == 0 {
					in = gov.Input{Kind: gov.KindDeleted}
				} else {
					in = gov.Input{Kind: gov.KindAccepted}
				}
			default:
				results := []string{"succeeded", "succeeded", "failed", "skipped"}
				in = gov.Input{Kind: gov.KindOutcome, Outcome: &gov.Outcome{
					DispatchID:  events.DispatchID(spec.ID, st.NextRunAt),
					ScheduledAt: st.NextRunAt,
					Result:      results[r.IntN(len(results))],
					FinishedAt:  at,
					Fingerprint: fmt.Sprintf("fp-%d", r.IntN(3)),
				}}
			}
			st = gov.Decide(at, &spec, st, in).State
			out = append(out, st)
		}
	}
	return out
}

// TestDecodeScheduleMatchesUnmarshal round-trips every state the governor
// produced in random runs, and randomly filled states, through
// json.Marshal and compares decodeSchedule with a full decode.
func TestDecodeScheduleMatchesUnmarshal(t *testing.T) {
	var paused, unscheduled, fast int
	for seed := range uint64(4) {
		for _, st := range governorStates(t, seed, 250) {
			b, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			checkDecode(t, b)
			if st.Paused {
				paused++
			}
			if st.NextRunAt.IsZero() {
				unscheduled++
				continue
			}
			// The governor's own output must take the fast path, or the
			// scanner is not doing its job.
			if _, _, ok := scanSchedule(b); !ok {
				t.Fatalf("scanSchedule fell back on a governor state: %s", b)
			}
			fast++
		}
	}
	if paused == 0 || unscheduled == 0 || fast == 0 {
		t.Fatalf("coverage: %d paused, %d unscheduled, %d scheduled states; want some of each", paused, unscheduled, fast)
	}
	t.Logf("%d scheduled states (fast path), %d unscheduled, %d paused", fast, unscheduled, paused)

	r := rand.New(rand.NewPCG(42, 42))
	for range 8000 {
		st := randomState(r)
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		checkDecode(t, b)
		if r.IntN(4) == 0 {
			var ind bytes.Buffer
			if err := json.Indent(&ind, b, " ", "\t"); err != nil {
				t.Fatal(err)
			}
			checkDecode(t, ind.Bytes())
		}
	}
}

var weirdStrings = []string{
	"", "plain", "with space", `quo"te`, `back\slash`, "<html>&", "ünïcödé", "\u2028\u2029", "\x00\x1f",
	"\xff\xfe invalid utf-8", "emoji 🚀", "nextRunAt", `"nextRunAt":"2020-01-01T00:00:00Z"`, "}", "{[", "\\\"",
}

func randomString(r *rand.Rand) string { return weirdStrings[r.IntN(len(weirdStrings))] }

func randomTime(r *rand.Rand) time.Time {
	if r.IntN(4) == 0 {
		return time.Time{}
	}
	t := time.Unix(r.Int64N(1<<34)-1<<32, r.Int64N(1e9))
	switch r.IntN(4) {
	case 0:
		return t.UTC()
	case 1:
		return t.In(time.FixedZone("", (r.IntN(28)-14)*3600+r.IntN(2)*1800))
	case 2:
		return t.Truncate(time.Millisecond).UTC()
	default:
		return t.Truncate(time.Second).UTC()
	}
}

// randomState fills every field of a gov.State, each possibly zero.
func randomState(r *rand.Rand) gov.State {
	maybe := func() bool { return r.IntN(3) > 0 }
	var st gov.State
	if maybe() {
		st.TaskID = randomString(r)
	}
	st.NextRunAt = randomTime(r)
	if maybe() {
		all := gov.AllSources()
		st.Source = all[r.IntN(len(all))]
	} else {
		st.Source = gov.Source(randomString(r))
	}
	for range r.IntN(12) {
		st.Trail = append(st.Trail, randomString(r))
	}
	st.DecidedAt, st.CreatedAt = randomTime(r), randomTime(r)
	st.Input = gov.Kind(randomString(r))
	st.Failures, st.Runs = r.IntN(10), uint64(r.IntN(1000))
	st.LastScheduledAt, st.LastSuccessAt, st.LastFailureAt = randomTime(r), randomTime(r), randomTime(r)
	st.LastDispatchID, st.LastOutcome = randomString(r), randomString(r)
	for range r.IntN(4) {
		st.RecentDispatchIDs = append(st.RecentDispatchIDs, randomString(r))
	}
	st.Paused = r.IntN(2) == 0
	st.PausedUntil, st.PauseReason = randomTime(r), randomString(r)
	if maybe() {
		st.IntervalHint = &gov.IntervalHint{Interval: time.Duration(r.Int64N(1e12)), ExpiresAt: randomTime(r), Reason: randomString(r)}
	}
	if maybe() {
		st.OneShotHint = &gov.OneShotHint{At: randomTime(r), ExpiresAt: randomTime(r), Reason: randomString(r)}
	}
	st.LastCommandID = randomString(r)
	st.Deleted = r.IntN(5) == 0
	st.LastActivityAt, st.LastFingerprint = randomTime(r), randomString(r)
	st.UnchangedRuns, st.AdaptiveInterval = r.IntN(5), time.Duration(r.Int64N(1e12))
	st.BreakerOpenUntil = randomTime(r)
	if maybe() {
		st.DeadLetter = &gov.DeadLetterHold{DispatchID: randomString(r), Reason: randomString(r), At: randomTime(r), RecheckAt: randomTime(r)}
	}
	st.RequeuedAt, st.CatchUpPending = randomTime(r), r.IntN(3)
	if maybe() {
		st.Budget.Hour = r.Int64N(1e6)
		for i := range st.Budget.Counts {
			st.Budget.Counts[i] = r.Uint32N(100)
		}
	}
	return st
}

// TestDecodeScheduleEdges covers values the governor does not write but an
// operator could: each must decode exactly as json.Unmarshal decodes it.
func TestDecodeScheduleEdges(t *testing.T) {
	for _, in := range []string{
		`{"taskId":"a","nextRunAt":"2026-11-22T07:00:00.5Z","source":"baseline-interval","trail":["x"]}`,
		`{"nextRunAt":"2026-11-22T07:00:00+02:00","source":"catch-up"}`,
		`{"source":"catch-up","nextRunAt":"2026-11-22T07:00:00Z"}`,
		`  {  "nextRunAt" : "2026-11-22T07:00:00Z" ,  "source" : "x"  }  `,
		`{"nextRunAt":"2026-11-22T07:00:00Z"}`,
		`{"source":"paused","paused":true}`,
		`{}`,
		`null`,
		`[]`,
		`"x"`,
		``,
		`{"NextRunAt":"2026-11-22T07:00:00Z","source":"x"}`,
		`{"nextrunat":"2026-11-22T07:00:00Z","SOURCE":"x"}`,
		`{"next\u0052unAt":"2026-11-22T07:00:00Z","source":"x"}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"\u0041"}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"ünï"}`,
		`{"nextRunAt":null,"source":"x"}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":null}`,
		`{"nextRunAt":12,"source":"x"}`,
		`{"nextRunAt":"tomorrow","source":"x"}`,
		`{"nextRunAt":"2026-11-22T24:00:00Z","source":"x"}`,
		`{"nextRunAt":"2026-11-22 07:00:00Z","source":"x"}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":1}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","nextRunAt":"2027-01-01T00:00:00Z","source":"x"}`,
		`{"taskId":"a\"b","x":{"nextRunAt":"1999-01-01T00:00:00Z"},"y":[1,{"source":"no"}],"z":-1.5e3,"t":true,"f":false,"n":null,"nextRunAt":"2026-11-22T07:00:00Z","source":"x"}`,
		`{"trail":["a","b\\\"c"],"nextRunAt":"2026-11-22T07:00:00Z","source":"x"}`,
		`{"taskId":"a"`,
		`{"taskId":}`,
		// Invalid JSON before the three fields: json.Unmarshal refuses it,
		// and so must the scanner (it scheduled each of these).
		`{"taskId":"a","x":tru,"nextRunAt":"2026-03-02T10:00:00Z","source":"baseline-interval","createdAt":"2026-03-01T00:00:00Z"}`,
		`{"taskId":tru,"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z","trail":[}`,
		"{\"taskId\":\"a\x01b\",\"nextRunAt\":\"2026-11-22T07:00:00Z\",\"source\":\"x\",\"createdAt\":\"2026-11-21T07:00:00Z\"}",
		`{"taskId":"a\qb","nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"taskId":"a\u00zz","nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"taskId":"a\u00e9\/\b\f\n\r\t","nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"n":01,"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"n":-,"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"n":1.,"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"n":1e,"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"n":+1,"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"n":nulls,"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"n":-0.5E+10,"m":0,"t":true,"f":false,"z":null,"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"x":[1,2},"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"x":{"a":tru},"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"x":["\q"],"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"x":{"a" 1},"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00.123456789+01:00","trail":["a"]}`,
		`{"createdAt":"2026-11-21T07:00:00Z","nextRunAt":"2026-11-22T07:00:00Z","source":"x"}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"x","trail":["a"],"createdAt":"2026-11-21T07:00:00Z"}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":null}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"yesterday"}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"x","CreatedAt":"2026-11-21T07:00:00Z"}`,
		`{"createdAt":"2026-11-21T07:00:00Z","createdAt":"2026-11-20T07:00:00Z","nextRunAt":"2026-11-22T07:00:00Z","source":"x"}`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"0001-01-01T00:00:00Z"}`,
		"\ufeff{\"nextRunAt\":\"2026-11-22T07:00:00Z\",\"source\":\"x\"}",
	} {
		t.Run(in, func(t *testing.T) { checkDecode(t, []byte(in)) })
	}
	// The one deliberate difference: the scanner stops once it has the
	// three fields (or two and the object's end) and does not read the
	// rest, so a broken tail goes unnoticed.
	for _, in := range []string{
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z"`,
		`{"nextRunAt":"2026-11-22T07:00:00Z","source":"x"} trailing`,
		`{"taskId":"a","nextRunAt":"2026-11-22T07:00:00Z","source":"x","createdAt":"2026-11-21T07:00:00Z","trail":[}`,
	} {
		t.Run(in, func(t *testing.T) {
			sc, err := decodeSchedule([]byte(in))
			if err != nil || !sc.next.Equal(time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)) || string(sc.source) != "x" {
				t.Fatalf("got %v %q %v, want the prefix's schedule", sc.next, sc.source, err)
			}
		})
	}
}

// FuzzDecodeSchedule checks decodeSchedule against json.Unmarshal on any
// input in which nextRunAt and source appear at most once (a later
// duplicate is past the point where the scanner stops), and that it never
// panics. On invalid JSON the two agree but for the one deliberate
// difference: a tail past the fields the scanner read. Invalid JSON it
// accepts must be a valid prefix (closed, it is valid JSON) that
// json.Unmarshal decodes to the same schedule.
func FuzzDecodeSchedule(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 7))
	for range 20 {
		b, err := json.Marshal(randomState(r))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"nextRunAt":"2026-11-22T07:00:00Z","source":"x"}`))
	f.Add([]byte(`{"taskId":"a\\","nextRunAt":"2026-11-22T07:00:00.999999999-07:00","source":"y"}`))
	f.Add([]byte(`{"x":[{"y":"}"}],"Source":"z","nextRunAt":"2026-11-22T07:00:00Z"}`))
	f.Add([]byte(`{"taskId":"a","x":tru,"nextRunAt":"2026-03-02T10:00:00Z","source":"baseline-interval","createdAt":"2026-03-01T00:00:00Z"}`))
	f.Add([]byte("{\"taskId\":\"a\x01\\q\",\"n\":-1.5e+3,\"nextRunAt\":\"2026-11-22T07:00:00Z\",\"source\":\"x\",\"createdAt\":\"2026-11-21T07:00:00Z\",\"trail\":[}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := decodeSchedule(b)
		in := b
		if !json.Valid(b) {
			_, n, ok := scanSchedule(b)
			if !ok {
				if err == nil {
					t.Fatalf("decodeSchedule(%q) accepted invalid JSON through json.Unmarshal", b)
				}
				return
			}
			// Accepted from a prefix: the prefix must be valid JSON
			// whose decoding agrees (the tail is the difference).
			in = b[:n:n]
			if in[n-1] != '}' {
				in = append(in, '}')
			}
			if !json.Valid(in) {
				t.Fatalf("decodeSchedule(%q) accepted the invalid prefix %q", b, b[:n])
			}
		}
		if repeatsField(in) {
			return
		}
		var want scheduled
		wantErr := json.Unmarshal(in, &want)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("decodeSchedule(%q): err %v, json.Unmarshal err %v", b, err, wantErr)
		}
		if err == nil && (!sc.next.Equal(want.NextRunAt) || string(sc.source) != want.Source || !sc.created.Equal(want.CreatedAt)) {
			t.Fatalf("decodeSchedule(%q) = %v %q %v, json.Unmarshal %v %q %v", b, sc.next, sc.source, sc.created, want.NextRunAt, want.Source, want.CreatedAt)
		}
	})
}

// repeatsField reports whether a top-level JSON object has more than one
// key that encoding/json could match to nextRunAt, to source, or to
// createdAt.
func repeatsField(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	var next, source, created int
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		key, _ := tok.(string)
		if strings.EqualFold(key, "nextRunAt") {
			next++
		}
		if strings.EqualFold(key, "source") {
			source++
		}
		if strings.EqualFold(key, "createdAt") {
			created++
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false
		}
	}
	return next > 1 || source > 1 || created > 1
}

// BenchmarkDecodeSchedule is decodeSchedule alone on governor-written
// states (BenchmarkApplyLoad measures it within apply).
func BenchmarkDecodeSchedule(b *testing.B) {
	now := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	values := make([][]byte, 64)
	for i := range values {
		values[i] = acceptedState(b, now, fmt.Sprintf("scale-%07d", i), now.Add(time.Duration(i)*time.Minute))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := decodeSchedule(values[i%len(values)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
