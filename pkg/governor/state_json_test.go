package governor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"
)

// compareStateJSON checks AppendJSON against json.Marshal on one state.
func compareStateJSON(t *testing.T, s State) {
	t.Helper()
	want, wantErr := json.Marshal(s)
	got, gotErr := s.AppendJSON(nil)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("AppendJSON err %v, json.Marshal err %v for %#v", gotErr, wantErr, s)
	}
	if gotErr == nil && !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON differs from json.Marshal:\n got %s\nwant %s", got, want)
	}
}

func TestStateAppendJSONMatchesMarshal(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 123456789, time.UTC)
	zone := time.FixedZone("x", -(3*3600 + 30*60))
	full := State{
		TaskID: "t1", NextRunAt: t0, Source: SourceBaselineInterval, Trail: []string{"a", "b <c> & \"d\""},
		DecidedAt: t0, CreatedAt: t0.In(zone), Input: KindOutcome, Failures: -2, Runs: 1 << 63,
		LastScheduledAt: t0, RunningSlot: t0.In(zone), LastDispatchID: "t1:1", RecentDispatchIDs: []string{"t1:0", "t\"<>"}, LastOutcome: "succeeded",
		LastSuccessAt: t0, LastFailureAt: t0, Paused: true, PausedUntil: t0, PauseReason: "maintenance\n\t\u2028é\xff",
		IntervalHint:  &IntervalHint{Interval: time.Second, ExpiresAt: t0},
		OneShotHint:   &OneShotHint{Reason: "r"},
		LastCommandID: "c", LastCommandSeq: 1<<64 - 1, LastBreakerSeq: 7, LastCommandAt: t0, LastBreakerAt: t0.In(zone), Deleted: true, LastActivityAt: t0, LastFingerprint: "f", UnchangedRuns: 3,
		AdaptiveInterval: -time.Minute, BreakerOpenUntil: t0, BreakerKey: "host_\"<a>", DeadLetter: &DeadLetterHold{Reason: "x", At: t0},
		RequeuedAt: t0, CatchUpPending: 4, Budget: RunLedger{Counts: [24]uint32{3: 7}}, LastStartedAt: t0.In(zone),
		GridStep: 4 * time.Minute,
	}
	for name, s := range map[string]State{
		"zero":             {},
		"full":             full,
		"interval hint":    {TaskID: "t", IntervalHint: &IntervalHint{Reason: "r"}},
		"dead letter":      {DeadLetter: &DeadLetterHold{DispatchID: "d"}},
		"dead letter bare": {DeadLetter: &DeadLetterHold{}},
		"budget hour":      {Budget: RunLedger{Hour: 12}},
		"empty trail":      {Trail: []string{}},
		"empty recent":     {RecentDispatchIDs: []string{}},
		"year 10000":       {NextRunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"hint year -1":     {IntervalHint: &IntervalHint{ExpiresAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}},
	} {
		t.Run(name, func(t *testing.T) { compareStateJSON(t, s) })
	}
}

// TestStateAppendJSONGridStep: the grid's step is written as gridStep in
// nanoseconds, and a zero step (no grid slot, an older state) writes no
// key, as json.Marshal's omitempty does.
func TestStateAppendJSONGridStep(t *testing.T) {
	for _, c := range []struct {
		step time.Duration
		want string
	}{
		{0, `{"taskId":"t"`},
		{4 * time.Minute, `"gridStep":240000000000}`},
	} {
		s := State{TaskID: "t", GridStep: c.step}
		got, err := s.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(got, []byte(c.want)) || (c.step == 0) == bytes.Contains(got, []byte(`"gridStep"`)) {
			t.Errorf("step %s: %s; want %s, a gridStep key only for a step", c.step, got, c.want)
		}
		compareStateJSON(t, s)
	}
}

// fuzzBytes hands out the fuzzer's bytes as field values.
type fuzzBytes []byte

func (f *fuzzBytes) u64() uint64 {
	var b [8]byte
	n := copy(b[:], *f)
	*f = (*f)[n:]
	return binary.LittleEndian.Uint64(b[:])
}

func (f *fuzzBytes) str() string {
	n := int(f.u64() % 12)
	n = min(n, len(*f))
	s := string((*f)[:n])
	*f = (*f)[n:]
	return s
}

func (f *fuzzBytes) time() time.Time {
	switch v := f.u64(); v % 4 {
	case 0:
		return time.Time{}
	case 1:
		return time.Unix(0, int64(v)).UTC()
	default: // out-of-range years and odd zones too
		return time.Unix(int64(v)>>8, int64(v%1e9)).In(time.FixedZone("z", int(int32(f.u64()))%(36*3600)))
	}
}

func FuzzStateAppendJSON(f *testing.F) {
	f.Add([]byte("seed"))
	f.Add(bytes.Repeat([]byte{0xff, 1, 2, '<', '"', 0}, 80))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzBytes(data)
		flags := in.u64()
		s := State{
			TaskID: in.str(), NextRunAt: in.time(), Source: Source(in.str()), DecidedAt: in.time(),
			CreatedAt: in.time(), Input: Kind(in.str()), Failures: int(in.u64()), Runs: in.u64(),
			LastScheduledAt: in.time(), LastDispatchID: in.str(), LastOutcome: in.str(),
			LastSuccessAt: in.time(), LastFailureAt: in.time(), Paused: flags&1 != 0, PausedUntil: in.time(),
			PauseReason: in.str(), LastCommandID: in.str(), LastCommandSeq: in.u64(), LastBreakerSeq: in.u64(), Deleted: flags&2 != 0, LastActivityAt: in.time(),
			LastFingerprint: in.str(), UnchangedRuns: int(in.u64()), AdaptiveInterval: time.Duration(in.u64()),
			BreakerOpenUntil: in.time(), RequeuedAt: in.time(), CatchUpPending: int(in.u64()), LastStartedAt: in.time(),
			GridStep: time.Duration(in.u64()), RunningSlot: in.time(), BreakerKey: in.str(),
			SpecRevision: in.u64(), FingerprintFrom: in.time(), LastCommandAt: in.time(), LastBreakerAt: in.time(),
		}
		for range flags >> 8 % 4 {
			s.Trail = append(s.Trail, in.str())
		}
		for range flags >> 10 % 4 {
			s.RecentDispatchIDs = append(s.RecentDispatchIDs, in.str())
		}
		if flags&4 != 0 {
			s.IntervalHint = &IntervalHint{Interval: time.Duration(in.u64()), ExpiresAt: in.time(), Reason: in.str()}
		}
		if flags&8 != 0 {
			s.OneShotHint = &OneShotHint{At: in.time(), ExpiresAt: in.time(), Reason: in.str()}
		}
		if flags&16 != 0 {
			s.DeadLetter = &DeadLetterHold{DispatchID: in.str(), Reason: in.str(), At: in.time(), RecheckAt: in.time()}
		}
		if flags&32 != 0 {
			s.Budget.Hour = int64(in.u64())
			for i := range s.Budget.Counts {
				s.Budget.Counts[i] = uint32(in.u64() % 3)
			}
		}
		compareStateJSON(t, s)
	})
}

func BenchmarkStateJSON(b *testing.B) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 123456789, time.UTC)
	s := State{
		TaskID: "task-0042", NextRunAt: t0.Add(time.Second), Source: SourceBaselineInterval,
		Trail:     []string{"baseline-interval: next slot of 1s", "clamped to [1s, 1h]"},
		DecidedAt: t0, CreatedAt: t0, Input: KindOutcome, Runs: 1234, LastScheduledAt: t0,
		LastDispatchID: "task-0042:1795428000000", LastOutcome: "succeeded", LastSuccessAt: t0,
	}
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = s.AppendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
