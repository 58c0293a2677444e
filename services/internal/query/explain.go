package query

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/streams"
)

// Explanation is a task's decision timeline rebuilt from the streams.
type Explanation struct {
	TaskID string `json:"taskId"`
	// Timeline lists every input the governor applied, in order; those
	// that changed nothing are marked NoChange.
	Timeline []ExplainedStep `json:"timeline"`
	// Replayed is the state the replay ends with (its specRevision is
	// Stored's: no stream records a spec's KV revision); Stored is what
	// KV flyball-schedules holds. Agrees reports whether their next run
	// and source match.
	Replayed *gov.State `json:"replayed,omitempty"`
	Stored   *gov.State `json:"stored,omitempty"`
	Agrees   bool       `json:"agrees"`
	// Pending counts the last inputs of the timeline that the governor
	// had not applied when Stored was read: stored within InFlight
	// before it, after the decision Stored holds. Agrees then compares
	// Stored with the replay before them, and Replayed is the schedule
	// they lead to. An input older than InFlight is never pending: a
	// stored schedule that lags it is a mismatch.
	Pending int `json:"pending,omitempty"`
	// DeletedAt is when the task was deleted, if it was last: its last
	// task.deleted in TASKS, when neither the replay nor the store holds
	// a schedule (the replay has none to delete when the creation has
	// aged out of TASKS, a year after it).
	DeletedAt time.Time `json:"deletedAt,omitzero"`
	// NothingReplayed is set when no input of the task could be
	// replayed (its creation is no longer in TASKS, or never was): Agrees
	// then only says there is no mismatch, there being no replay to
	// compare with.
	NothingReplayed bool `json:"nothingReplayed,omitempty"`
	// Hidden counts the decisions replayed before since, left out of
	// Timeline.
	Hidden int `json:"hidden,omitempty"`
	// Warnings note what limits the replay, such as expired history.
	Warnings []string `json:"warnings,omitempty"`
}

// ExplainedStep is one input and the decision it produced.
type ExplainedStep struct {
	At        time.Time `json:"at"`
	Stream    string    `json:"stream"`
	Seq       uint64    `json:"seq"`
	Input     string    `json:"input"`
	NextRunAt time.Time `json:"nextRunAt,omitzero"`
	Source    string    `json:"source"`
	Trail     []string  `json:"trail,omitempty"`
	// NoChange, when set, says why the input left the schedule as it
	// was (NextRunAt and Source are then the schedule it kept).
	NoChange string `json:"noChange,omitempty"`
	// Pending marks an input the governor had not yet applied (see
	// Explanation.Pending): the decision shown is the one it will take.
	Pending bool `json:"pending,omitempty"`
}

// InFlight is how long an input may have been stored and not yet be
// applied to the stored schedule without explain calling it a mismatch:
// the governor decides within milliseconds, but a busy one works
// through a backlog, and a task that runs every second always has an
// input on its way. One stored earlier that the schedule has not seen
// means a governor that is down, far behind, or wrong.
const InFlight = 10 * time.Second

// DefaultMaxExplainInputs is how many inputs of a task Explain holds at
// most, an estimated 1-2 KB each while it replays (100-200 MB): TASKS and
// DEADLETTER keep a task's messages for months with no per-subject
// limit, and a task hinted every few seconds has hundreds of thousands.
const DefaultMaxExplainInputs = 100_000

// Explain replays task id's inputs from TASKS, RUNS, HEALTH and DEADLETTER
// through the governor, exactly as the governor service applied them, and
// compares the result with the stored schedule. Steps before since are
// replayed but not listed. From HEALTH it reads the transitions of the
// task's own breaker and of every host breaker its calls used (the host
// keys of its specs and the breakerKey of its runs), and keeps those whose
// taskId names the task, as the governor does.
func (r *Reader) Explain(ctx context.Context, id string, since time.Time) (*Explanation, error) {
	if !events.ValidToken(id) {
		return nil, &events.FieldError{Field: "id", Rule: "must be 1-128 characters of [A-Za-z0-9_-]"}
	}
	type item struct {
		msg  Message
		step governor.Step
		// answered is set once the command's answer is read: accepted
		// tells which, and noChange, for an accepted one, why it changed
		// nothing (governor.UnappliedWhy).
		answered, accepted bool
		noChange           string
	}
	var items []item
	var deletedAt time.Time // the last task.deleted's stored time
	// An empty timeline (every line hidden by since) is [] in JSON, not null.
	ex := &Explanation{TaskID: id, Timeline: []ExplainedStep{}}
	// The governor answers a task's commands one by one, in stored
	// order, so an answer (task.accepted or task.rejected) is the answer
	// to the oldest unanswered command with its id: an id can be sent
	// again, and the second command rejected (a create of a task that
	// exists). A command left without one (JetStream dropped its answer
	// as a duplicate: the governor answers under the Nats-Msg-Id
	// accepted:<id> or rejected:<id>) is judged by ReplayAnswers.
	unanswered := map[string][]int{} // command id: its items waiting for an answer, oldest first
	answer := func(cmdID string, accepted bool, noChange string) {
		if waiting := unanswered[cmdID]; len(waiting) > 0 {
			if i := waiting[0]; i >= 0 { // -1: a command Translate refused, or one left out
				items[i].answered, items[i].accepted, items[i].noChange = true, accepted, noChange
			}
			// An answered id is forgotten: a task hinted every few
			// seconds for a year sends millions of them.
			if len(waiting) == 1 {
				delete(unanswered, cmdID)
			} else {
				unanswered[cmdID] = waiting[1:]
			}
		}
	}
	limit := r.MaxExplainInputs
	if limit <= 0 {
		limit = DefaultMaxExplainInputs
	}
	// left counts the inputs left out to keep at most limit, stored
	// between leftFrom and leftTo.
	var left int
	var leftFrom, leftTo time.Time
	// keep leaves out the inputs between the task's creation, which the
	// replay starts from, and the newest limit-1, in replay order: the
	// latest decisions are the ones asked about. Their commands keep
	// their place in the queue for an answer. The creation is the last
	// create accepted (the first input if none is known yet): those
	// before it are of the schedule a delete ended. A later create not
	// yet answered is kept too: it may be the creation.
	keep := func() {
		if len(items) <= limit {
			return
		}
		first := 0
		for i := len(items) - 1; i > 0 && first == 0; i-- {
			if it := &items[i]; it.step.Input.Kind == gov.KindAccepted && it.answered && it.accepted && it.noChange == "" {
				first = i
			}
		}
		msgs := make([]Message, len(items)-first-1)
		for i := range msgs {
			msgs[i] = items[first+1+i].msg
		}
		order := replayOrder(msgs)
		kept := make([]bool, len(items))
		kept[first] = true
		for _, i := range order[max(0, len(order)-(limit-1)):] {
			kept[first+1+i] = true
		}
		for i := first + 1; i < len(items); i++ {
			if items[i].step.Input.Kind == gov.KindAccepted && !items[i].answered {
				kept[i] = true
			}
		}
		moved := make([]int, len(items))
		out := items[:0:0]
		for i := range items {
			if !kept[i] {
				moved[i] = -1
				left++
				if t := items[i].msg.Time; leftFrom.IsZero() || t.Before(leftFrom) {
					leftFrom = t
				}
				if t := items[i].msg.Time; t.After(leftTo) {
					leftTo = t
				}
				continue
			}
			moved[i] = len(out)
			out = append(out, items[i])
		}
		items = out
		for _, waiting := range unanswered {
			for k, i := range waiting {
				if i >= 0 {
					waiting[k] = moved[i]
				}
			}
		}
	}
	// keys are the breaker keys the task's calls may have used: its id,
	// and the host key of every spec it had with breaker.scope host.
	keys := map[string]bool{id: true}
	addKey := func(spec *events.TaskSpec) {
		if spec != nil && spec.ID == id {
			keys[executor.BreakerKey(spec)] = true
		}
	}
	if ent, err := r.tasks.Get(ctx, id); err == nil {
		var spec events.TaskSpec
		if err := json.Unmarshal(ent.Value(), &spec); err != nil {
			// The governor terminates the task's signals unapplied while
			// it cannot read the spec (signal), and the replay, which
			// takes the specs from TASKS, would apply them: an outcome
			// shown as pending, then a mismatch, with no reason given.
			ex.Warnings = append(ex.Warnings, fmt.Sprintf("the task's spec in KV %s does not decode (%v): until a task.updated replaces it, the governor applies none of its run outcomes, breaker transitions and dead letters, and rejects its commands but an update or a delete; the replay applies them, so it may differ from what was stored",
				streams.BucketTasks, err))
		} else {
			addKey(&spec)
		}
	} else if !jsutil.IsKeyMissing(err) {
		return nil, err
	}
	// The stored schedule is read first: every input the governor had
	// applied to it was stored before, so the scan holds them all, and
	// any input after its decision is one still on its way.
	tasks, readAt, err := r.serverNow(ctx)
	if err != nil {
		return nil, err
	}
	if ent, err := r.schedules.Get(ctx, id); err == nil {
		var st gov.State
		if json.Unmarshal(ent.Value(), &st) == nil {
			ex.Stored = &st
		}
	} else if !jsutil.IsKeyMissing(err) {
		return nil, err
	}
	var histories []streamHistory
	for _, src := range []struct {
		stream   string
		subjects func() []string
	}{
		{streams.StreamTasks, func() []string { return []string{"flyball.task.*." + id} }},
		{streams.StreamRuns, func() []string { return []string{"flyball.run.*." + id} }},
		// The governor applies a breaker transition to the task its
		// taskId names, whatever the key: a host breaker's transitions
		// are on its host key's subjects.
		{streams.StreamHealth, func() []string {
			subjects := make([]string, 0, len(keys))
			for k := range keys {
				subjects = append(subjects, events.BreakerSubject("*", k))
			}
			slices.Sort(subjects)
			return subjects
		}},
		{streams.StreamDeadLetter, func() []string { return []string{events.DeadLetterSubject(id)} }},
	} {
		stream := tasks // read for readAt
		if src.stream != streams.StreamTasks {
			if stream, err = r.js.Stream(ctx, src.stream); err != nil {
				return nil, fmt.Errorf("stream %s: %w", src.stream, err)
			}
		}
		held := streamHistory{info: stream.CachedInfo(), subjects: map[string]subjectHistory{}}
		err = Scan(ctx, r.js, ScanOptions{Stream: src.stream, Subjects: src.subjects()}, func(m Message) error {
			if h, ok := held.subjects[m.Subject]; ok {
				h.n++
				held.subjects[m.Subject] = h
			} else {
				held.subjects[m.Subject] = subjectHistory{n: 1, first: m.Time}
			}
			if m.Subject == events.TaskSubject(events.VerbAccepted, id) {
				if e, err := events.Decode(m.Header, m.Data); err == nil {
					var acc events.TaskAccepted
					if events.DecodeData(e, &acc) == nil {
						answer(acc.CommandID, true, governor.UnappliedWhy(&acc))
					}
				}
				return nil
			}
			if m.Subject == events.TaskSubject(events.VerbRejected, id) {
				if e, err := events.Decode(m.Header, m.Data); err == nil {
					var rej events.TaskRejected
					if events.DecodeData(e, &rej) == nil {
						answer(rej.CommandID, false, "")
					}
				}
				return nil
			}
			if k := m.Header.Get(events.HeaderBreakerKey); k != "" && events.ValidToken(k) {
				keys[k] = true // the key the executor used for this call
			}
			step, err := governor.Translate(m.Subject, m.Header, m.Data, m.Time)
			if err != nil && !errors.Is(err, governor.ErrNoEffect) && src.stream == streams.StreamTasks {
				// The governor rejected it, answering under the task's
				// subject unless the subject is unreadable (_invalid).
				if _, serr := events.ParseSubject(m.Subject); serr == nil {
					_, cmdID := events.PeekAttributes(m.Header, m.Data)
					unanswered[cmdID] = append(unanswered[cmdID], -1)
				}
			}
			if err != nil || step.TaskID != id {
				return nil //nolint:nilerr // rejected or malformed inputs, or another task's, never changed this schedule
			}
			// The stream sequence, as the governor records it for commands
			// and breaker transitions (lastCommandSeq, lastBreakerSeq). The
			// replay reads each message once, in stream order: never a
			// redelivery.
			step.Seq = m.Seq
			if step.Input.Kind == gov.KindDeleted {
				// Even one the input limit leaves out, or the replay
				// skips, its creation gone: the governor refuses no
				// delete it can read.
				deletedAt = m.Time
			}
			addKey(step.Spec)
			if step.CommandID != "" {
				unanswered[step.CommandID] = append(unanswered[step.CommandID], len(items))
			}
			// Only where and when it was stored is needed from here on:
			// the body and headers are most of what a message holds.
			m.Header, m.Data = nil, nil
			items = append(items, item{msg: m, step: step})
			if len(items) >= 2*limit {
				keep()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		histories = append(histories, held)
	}
	keep()
	if left > 0 {
		ex.Warnings = append(ex.Warnings, fmt.Sprintf("explain holds at most %d inputs of a task (flyball explain --max-inputs): the %d stored from %s to %s are left out, and the replay goes from the input stored at %s (the task's creation, if TASKS still holds it) straight to the newest %d, so it starts from incomplete history and may not agree with the stored schedule",
			limit, left, leftFrom.UTC().Format(time.RFC3339Nano), leftTo.UTC().Format(time.RFC3339Nano), items[0].msg.Time.UTC().Format(time.RFC3339Nano), len(items)-1))
	}
	msgs := make([]Message, len(items))
	for i := range items {
		msgs[i] = items[i].msg
	}
	ordered := make([]item, 0, len(items))
	for _, i := range replayOrder(msgs) {
		ordered = append(ordered, items[i])
	}
	items = ordered
	replay := func(items []item) []governor.Entry {
		steps := make([]governor.Step, len(items))
		for i := range items {
			steps[i] = items[i].step
		}
		return governor.ReplayAnswers(steps, func(i int) governor.Answer {
			return governor.Answer{Known: items[i].answered, Accepted: items[i].accepted, NoChange: items[i].noChange}
		})
	}
	entries := replay(items)
	ex.Agrees, ex.Pending = agreement(entries, ex.Stored, readAt)
	// The governor reads each stream on its own: the input that decided
	// the stored schedule may have been applied after a command or
	// breaker transition stored later, which the schedule records
	// (applied). The replay then applies it there too; only that last
	// input's place is known, so an earlier crossing stays as stored.
	if j, k := crossed(entries, ex.Stored); j >= 0 {
		from, to := entries[j].Index, entries[k].Index
		a, b := items[from].msg, items[to].msg
		moved := slices.Insert(slices.Delete(slices.Clone(items), from, from+1), to, items[from])
		follows := "the replay in that order does not agree either, so the timeline keeps the stored times' order"
		if again := replay(moved); len(again) == len(entries) {
			if agrees, pending := agreement(again, ex.Stored, readAt); agrees || !ex.Agrees {
				items, entries, ex.Agrees, ex.Pending = moved, again, agrees, pending
				follows = "the timeline follows the order the schedule records"
			}
		}
		ex.Warnings = append(ex.Warnings, fmt.Sprintf("the stored schedule was decided by %s %d (stored %s) after the governor applied %s %d (stored %s): it reads each stream on its own, so it applied them in another order than their stored times; %s",
			a.Stream, a.Seq, a.Time.UTC().Format(time.RFC3339Nano), b.Stream, b.Seq, b.Time.UTC().Format(time.RFC3339Nano), follows))
	}

	ex.Replayed = stateAfter(entries, len(entries)-1)
	if ex.Replayed != nil && ex.Stored != nil {
		// The flyball-tasks revision of the spec is in no stream: the
		// replay cannot know it, and takes the stored schedule's.
		ex.Replayed.SpecRevision = ex.Stored.SpecRevision
	}
	for i, en := range entries {
		m := items[en.Index].msg
		if !since.IsZero() && en.Step.At.Before(since) {
			ex.Hidden++
			continue
		}
		ex.Timeline = append(ex.Timeline, ExplainedStep{
			At: en.Step.At, Stream: m.Stream, Seq: m.Seq, Input: en.Step.Summary,
			NextRunAt: en.Decision.NextRunAt, Source: string(en.Decision.Source), Trail: en.Decision.Trail,
			NoChange: en.NoChange, Pending: i >= len(entries)-ex.Pending,
		})
	}
	if ex.Replayed == nil && ex.Stored == nil {
		ex.DeletedAt = deletedAt
	}
	ex.NothingReplayed = len(entries) == 0
	if ex.NothingReplayed {
		// No replay, no mismatch: agreement compared the stored schedule
		// with none, and a task whose creation has aged out of TASKS
		// exited 1 as a MISMATCH.
		ex.Agrees, ex.Pending = true, 0
	}
	switch {
	case len(entries) == 0 && ex.Stored != nil:
		ex.Warnings = append(ex.Warnings, "the task's creation and updates are no longer in TASKS: nothing could be replayed")
	case len(entries) == 0 && !ex.DeletedAt.IsZero():
		ex.Warnings = append(ex.Warnings, fmt.Sprintf("no creation of the task is in TASKS (aged out, or it never existed), only commands up to its delete: nothing could be replayed (flyball replay --stream TASKS --subject 'flyball.task.*.%s' lists them)", id))
	case len(entries) > 0 && entries[0].Step.Input.Kind != gov.KindAccepted:
		ex.Warnings = append(ex.Warnings, "the task's creation is no longer in TASKS: the replay starts mid-history and may differ from what was stored")
	}
	if len(entries) > 0 {
		now := time.Now()
		for _, h := range histories {
			ex.Warnings = append(ex.Warnings, h.lost(entries[0].Step.At, now)...)
		}
	}
	return ex, nil
}

// streamHistory is what a stream held of a task when explain read it.
type streamHistory struct {
	info     *jetstream.StreamInfo
	subjects map[string]subjectHistory
}

// subjectHistory counts the messages read on one subject.
type subjectHistory struct {
	n     int
	first time.Time
}

// lost describes the messages of the task the stream may have dropped
// since start, when the replay began, by its limits (max age, the task's
// subjects at their per-subject limit): the replay then misses inputs the
// governor applied. A stream's first message alone tells nothing: other
// tasks' subjects at their limit move it on too.
func (h streamHistory) lost(start, now time.Time) []string {
	var out []string
	name, st, cfg := h.info.Config.Name, h.info.State, h.info.Config
	if cfg.MaxAge > 0 && now.Sub(start) > cfg.MaxAge && st.FirstSeq > 1 {
		out = append(out, fmt.Sprintf("%s keeps messages for %s: those stored between the replay's start (%s) and %s have aged out, so the replay may differ from what was stored",
			name, events.Duration(cfg.MaxAge), start.UTC().Format(time.RFC3339), now.Add(-cfg.MaxAge).UTC().Format(time.RFC3339)))
	}
	if cfg.MaxMsgsPerSubject > 0 {
		subjects := slices.Sorted(maps.Keys(h.subjects))
		for _, subj := range subjects {
			if sh := h.subjects[subj]; int64(sh.n) >= cfg.MaxMsgsPerSubject && sh.first.After(start) {
				out = append(out, fmt.Sprintf("%s keeps %d messages per subject and holds %d on %s, from %s on: the older ones are missing, so the replay may differ from what was stored",
					name, cfg.MaxMsgsPerSubject, sh.n, subj, sh.first.UTC().Format(time.RFC3339)))
			}
		}
	}
	return out
}

// replayOrder returns the indexes of msgs in the order the replay applies
// them. The governor reads each stream on its own, in sequence order, so
// each stream's inputs keep their sequence order even where stored times
// step back (a new stream leader whose clock is behind the old one's);
// the streams are merged by stored time, the earlier stream (in msgs) first
// on a tie.
func replayOrder(msgs []Message) []int {
	var names []string
	byStream := map[string][]int{}
	for i, m := range msgs {
		if _, ok := byStream[m.Stream]; !ok {
			names = append(names, m.Stream)
		}
		byStream[m.Stream] = append(byStream[m.Stream], i)
	}
	queues := make([][]int, len(names))
	for k, name := range names {
		q := byStream[name]
		slices.SortStableFunc(q, func(a, b int) int { return cmp.Compare(msgs[a].Seq, msgs[b].Seq) })
		queues[k] = q
	}
	out := make([]int, 0, len(msgs))
	for len(out) < len(msgs) {
		next := -1
		for k, q := range queues {
			if len(q) == 0 {
				continue
			}
			if next < 0 {
				next = k
				continue
			}
			// Only the stored time: two streams' sequences count
			// different messages, so they tell nothing about which came
			// first, and on a tie the earlier stream (k) stays ahead.
			if msgs[q[0]].Time.Before(msgs[queues[next][0]].Time) {
				next = k
			}
		}
		out = append(out, queues[next][0])
		queues[next] = queues[next][1:]
	}
	return out
}

// stateAfter is the schedule the replay holds after entries[i]: none
// before the first entry (i < 0) or after a deletion.
func stateAfter(entries []governor.Entry, i int) *gov.State {
	if i < 0 || entries[i].Step.Input.Kind == gov.KindDeleted {
		return nil
	}
	st := entries[i].Decision.State
	return &st
}

// crossed finds, in entries (stored-time order), the input j that
// decided stored (its DecidedAt and input kind) and the last input k
// after it that stored records as applied (applied): the governor
// applied k before j. j is -1 if there is no such pair.
func crossed(entries []governor.Entry, stored *gov.State) (j, k int) {
	if stored == nil {
		return -1, -1
	}
	j = -1
	for i := len(entries) - 1; i >= 0 && j < 0; i-- {
		en := &entries[i]
		if !en.Decision.Ignored && en.Step.Input.Kind == stored.Input && en.Step.At.Equal(stored.DecidedAt) {
			j = i
		}
	}
	if j < 0 {
		return -1, -1
	}
	for k = len(entries) - 1; k > j; k-- {
		if applied(stored, &entries[k].Step) {
			return j, k
		}
	}
	return -1, -1
}

// applied reports whether stored records step as applied: a command or
// breaker transition at or below the last sequence applied from its
// stream, which the governor reads in order, and stored no later than
// that message (Step.AppliedBy, as the governor judges a redelivery: one
// stored later is new, its stream's sequences started over below the
// schedule's after a restore). Stored after the decision stored holds, it
// was applied before it all the same: the governor reads each stream on
// its own, so it is not on its way.
func applied(stored *gov.State, step *governor.Step) bool {
	return stored != nil && step.AppliedBy(stored)
}

// sameSchedule reports whether two schedules (nil: none) name the same
// next run and rule.
func sameSchedule(a, b *gov.State) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.NextRunAt.Equal(b.NextRunAt) && a.Source == b.Source
}

// agreement compares the stored schedule (read at readAt) with the
// replay. It agrees when stored is the replay's last schedule, or the
// schedule the replay held before its last inputs if each of those was
// stored within InFlight of readAt and after the decision stored holds
// (its DecidedAt, the stored time of the input it applied), and stored
// does not record it as applied: inputs still on their way to the
// governor. pending counts them.
func agreement(entries []governor.Entry, stored *gov.State, readAt time.Time) (agrees bool, pending int) {
	n := len(entries)
	if sameSchedule(stored, stateAfter(entries, n-1)) {
		return true, 0
	}
	for i := n - 1; i >= 0; i-- {
		at := entries[i].Step.At
		if at.Before(readAt.Add(-InFlight)) || (stored != nil && !at.After(stored.DecidedAt)) || applied(stored, &entries[i].Step) {
			return false, 0
		}
		before := stateAfter(entries, i-1)
		if sameSchedule(stored, before) && (stored == nil || before.DecidedAt.Equal(stored.DecidedAt)) {
			return true, n - i
		}
	}
	return false, 0
}

// serverNow is the NATS server's time, from a stream info it stamps (the
// inputs' stored times are on its clock, and explain's InFlight of 10 s
// would take this host's offset from it for inputs on their way): this
// host's clock only from a server that stamps none. It returns TASKS,
// whose info it read, for the history that needs that info too.
func (r *Reader) serverNow(ctx context.Context) (jetstream.Stream, time.Time, error) {
	tasks, err := r.js.Stream(ctx, streams.StreamTasks)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("stream %s: %w", streams.StreamTasks, err)
	}
	if ts := tasks.CachedInfo().TimeStamp; !ts.IsZero() {
		return tasks, ts, nil
	}
	return tasks, r.now(), nil
}
