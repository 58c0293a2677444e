package docexamples_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/docexamples"
	"github.com/flyballhq/flyball/streams"
)

// The stream, consumer and bucket tables of docs/architecture.md are what
// operators read when they size or debug a deployment. These tests hold
// every cell to the definitions in defs/, so a changed limit cannot leave
// the docs behind.

func architectureTable(t *testing.T, header string) [][]string {
	t.Helper()
	root := docexamples.Root(t)
	rows, err := docexamples.Table(root, "docs/architecture.md", header)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

var codeRE = regexp.MustCompile("`([^`]+)`")

// codes returns the backticked items of a cell before any parenthesis,
// with {a,b} alternatives expanded (`flyball.run.{succeeded,failed}.*`).
func codes(cell string) []string {
	cell, _, _ = strings.Cut(cell, " (")
	var out []string
	for _, m := range codeRE.FindAllStringSubmatch(cell, -1) {
		out = append(out, expand(m[1])...)
	}
	slices.Sort(out)
	return out
}

func expand(s string) []string {
	open, end := strings.IndexByte(s, '{'), strings.IndexByte(s, '}')
	if open < 0 || end < open {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[open+1:end], ",") {
		out = append(out, expand(s[:open]+alt+s[end+1:])...)
	}
	return out
}

// docDuration reads "30 s", "2 min", "24 h", "90 d".
func docDuration(s string) (time.Duration, error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), " ")
	v, err := strconv.Atoi(n)
	if !ok || err != nil {
		return 0, fmt.Errorf("duration %q is not '<n> <unit>'", s)
	}
	units := map[string]time.Duration{"s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	u, ok := units[unit]
	if !ok {
		return 0, fmt.Errorf("duration %q: unknown unit %q", s, unit)
	}
	return time.Duration(v) * u, nil
}

// unlimited maps JetStream's two ways of saying "no limit" (0 and -1) to -1.
func unlimited[T int | int64](n T) T {
	if n == 0 {
		return -1
	}
	return n
}

var (
	maxAgeRE     = regexp.MustCompile(`max age (\d+ \w+)`)
	perSubjectRE = regexp.MustCompile(`(\d+) messages? per subject`)
	leadingIntRE = regexp.MustCompile(`^\**(\d+)\**`)
	pinnedRE     = regexp.MustCompile("^pinned client, group `([^`]+)`, (\\d+ \\w+) timeout$")
	maxWaitingRE = regexp.MustCompile(`max waiting (\d+)`)
)

func TestArchitectureStreamTable(t *testing.T) {
	t.Parallel()
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]jetstream.StreamConfig{}
	for _, c := range cfgs {
		byName[c.Name] = c
	}
	rows := architectureTable(t, "| stream | subjects |")
	documented := 0
	for _, r := range rows {
		name := r[0]
		c, ok := byName[name]
		if !ok {
			t.Errorf("stream %s is documented but not defined", name)
			continue
		}
		documented++
		if got, want := codes(r[1]), slices.Sorted(slices.Values(c.Subjects)); !slices.Equal(got, want) {
			t.Errorf("%s subjects: docs %q, definition %q", name, got, want)
		}
		retention := map[string]jetstream.RetentionPolicy{"limits": jetstream.LimitsPolicy, "work queue": jetstream.WorkQueuePolicy}[strings.Trim(r[2], "*")]
		if retention != c.Retention || strings.Trim(r[2], "*") == "" {
			t.Errorf("%s retention: docs %q, definition %s", name, r[2], c.Retention)
		}
		var maxAge time.Duration
		if m := maxAgeRE.FindStringSubmatch(r[3]); m != nil {
			if maxAge, err = docDuration(m[1]); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if maxAge != c.MaxAge {
			t.Errorf("%s max age: docs %q, definition %s", name, r[3], c.MaxAge)
		}
		perSubject := int64(-1)
		if m := perSubjectRE.FindStringSubmatch(r[3]); m != nil {
			perSubject, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if perSubject != unlimited(c.MaxMsgsPerSubject) {
			t.Errorf("%s messages per subject: docs %q, definition %d", name, r[3], c.MaxMsgsPerSubject)
		}
		if got := strings.Contains(r[3], "discard new per subject"); got != c.DiscardNewPerSubject {
			t.Errorf("%s discard new per subject: docs %q, definition %v", name, r[3], c.DiscardNewPerSubject)
		}
		if window, err := docDuration(r[4]); err != nil || window != c.Duplicates {
			t.Errorf("%s duplicate window: docs %q, definition %s (%v)", name, r[4], c.Duplicates, err)
		}
		// The prose above the table.
		if c.Storage != jetstream.FileStorage || c.Replicas != 1 {
			t.Errorf("%s: storage %s, %d replicas; the docs say file storage and 1 replica", name, c.Storage, c.Replicas)
		}
		if wantDiscard := map[bool]jetstream.DiscardPolicy{true: jetstream.DiscardNew, false: jetstream.DiscardOld}[name == streams.StreamDispatch]; c.Discard != wantDiscard {
			t.Errorf("%s discard %s; the docs say only DISPATCH discards new messages", name, c.Discard)
		}
	}
	for name := range byName {
		if !strings.HasPrefix(name, "KV_") && !slices.ContainsFunc(rows, func(r []string) bool { return r[0] == name }) {
			t.Errorf("stream %s is defined but not in the docs' table", name)
		}
	}
	if documented < 6 {
		t.Fatalf("matched %d streams, want 6", documented)
	}
}

func TestArchitectureConsumerTable(t *testing.T) {
	t.Parallel()
	all, err := streams.ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	rows := architectureTable(t, "| stream / durable |")
	seen := map[string]bool{}
	for _, r := range rows {
		stream, durable, ok := strings.Cut(r[0], " / ")
		durable = strings.Trim(durable, "`")
		i := slices.IndexFunc(all[stream], func(c jetstream.ConsumerConfig) bool { return c.Durable == durable })
		if !ok || i < 0 {
			t.Errorf("consumer %s is documented but not defined", r[0])
			continue
		}
		c := all[stream][i]
		seen[stream+"/"+durable] = true
		want := c.FilterSubjects
		if c.FilterSubject != "" {
			want = []string{c.FilterSubject}
		}
		want = slices.Sorted(slices.Values(want))
		if got := codes(r[1]); r[1] == "all" && len(want) != 0 || r[1] != "all" && !slices.Equal(got, want) {
			t.Errorf("%s filter: docs %q, definition %q", r[0], r[1], want)
		}
		if wait, err := docDuration(r[2]); err != nil || wait != c.AckWait {
			t.Errorf("%s ack wait: docs %q, definition %s (%v)", r[0], r[2], c.AckWait, err)
		}
		maxDeliver := -1
		if m := leadingIntRE.FindStringSubmatch(r[3]); m != nil {
			maxDeliver, _ = strconv.Atoi(m[1])
		} else if r[3] != "unlimited" {
			t.Errorf("%s max deliver %q is neither a number nor unlimited", r[0], r[3])
		}
		if maxDeliver != unlimited(c.MaxDeliver) {
			t.Errorf("%s max deliver: docs %q, definition %d", r[0], r[3], c.MaxDeliver)
		}
		if m := leadingIntRE.FindStringSubmatch(r[4]); m == nil || m[1] != strconv.Itoa(c.MaxAckPending) {
			t.Errorf("%s max ack pending: docs %q, definition %d", r[0], r[4], c.MaxAckPending)
		}
		if m := maxWaitingRE.FindStringSubmatch(r[4]); m != nil && m[1] != strconv.Itoa(c.MaxWaiting) || m == nil && c.MaxWaiting != 0 {
			t.Errorf("%s max waiting: docs %q, definition %d", r[0], r[4], c.MaxWaiting)
		}
		priority := ""
		if len(r) > 6 {
			priority = r[6]
		}
		switch m := pinnedRE.FindStringSubmatch(priority); c.PriorityPolicy {
		case jetstream.PriorityPolicyNone:
			if priority != "—" {
				t.Errorf("%s priority: docs %q, definition none", r[0], priority)
			}
		case jetstream.PriorityPolicyPinned:
			ttl, err := time.Duration(0), error(nil)
			if m != nil {
				ttl, err = docDuration(m[2])
			}
			if m == nil || err != nil || !slices.Equal(c.PriorityGroups, []string{m[1]}) || ttl != c.PinnedTTL {
				t.Errorf("%s priority: docs %q, definition pinned client, groups %q, timeout %s", r[0], priority, c.PriorityGroups, c.PinnedTTL)
			}
		default:
			t.Errorf("%s: priority policy %v is not described in the docs", r[0], c.PriorityPolicy)
		}
		// The prose above the table.
		if c.AckPolicy != jetstream.AckExplicitPolicy || c.DeliverPolicy != jetstream.DeliverAllPolicy {
			t.Errorf("%s: ack %s, deliver %s; the docs say explicit ack, deliver all", r[0], c.AckPolicy, c.DeliverPolicy)
		}
	}
	for stream, cs := range all {
		for _, c := range cs {
			if !seen[stream+"/"+c.Durable] {
				t.Errorf("consumer %s/%s is defined but not in the docs' table", stream, c.Durable)
			}
		}
	}
}

func TestArchitectureBucketTable(t *testing.T) {
	t.Parallel()
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	rows := architectureTable(t, "| KV bucket |")
	documented := map[string]bool{}
	for _, r := range rows {
		bucket := strings.Trim(r[0], "`")
		i := slices.IndexFunc(cfgs, func(c jetstream.StreamConfig) bool { return c.Name == "KV_"+bucket })
		if i < 0 {
			t.Errorf("bucket %s is documented but not defined", bucket)
			continue
		}
		c := cfgs[i]
		documented[c.Name] = true
		if r[3] != strconv.FormatInt(c.MaxMsgsPerSubject, 10) {
			t.Errorf("%s history: docs %q, definition %d", bucket, r[3], c.MaxMsgsPerSubject)
		}
		var ttl time.Duration
		if r[4] != "—" {
			if ttl, err = docDuration(r[4]); err != nil {
				t.Errorf("%s: %v", bucket, err)
			}
		}
		if ttl != c.MaxAge {
			t.Errorf("%s TTL: docs %q, definition %s", bucket, r[4], c.MaxAge)
		}
	}
	for _, c := range cfgs {
		if strings.HasPrefix(c.Name, "KV_") && !documented[c.Name] {
			t.Errorf("bucket %s is defined but not in the docs' table", strings.TrimPrefix(c.Name, "KV_"))
		}
	}
}

// TestEventCatalogTable: the catalog of docs/events.md lists every event
// type, each on the subject flyball's builder makes for it, in the stream
// whose subjects take that subject.
func TestEventCatalogTable(t *testing.T) {
	t.Parallel()
	root := docexamples.Root(t)
	rows, err := docexamples.Table(root, "docs/events.md", "| type | subject | stream |")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // type → subject, with <placeholders>
		events.TypeRunDue:       events.DispatchSubject("<id>"),
		events.TypeDeadLettered: events.DeadLetterSubject("<id>"),
	}
	for _, v := range []events.Verb{events.VerbCreated, events.VerbUpdated, events.VerbDeleted, events.VerbPaused, events.VerbResumed, events.VerbHinted, events.VerbRequeued, events.VerbAccepted, events.VerbRejected} {
		want[v.Type()] = events.TaskSubject(v, "<id>")
	}
	for _, o := range []events.Outcome{events.OutcomeStarted, events.OutcomeSucceeded, events.OutcomeFailed, events.OutcomeSkipped, events.OutcomeRecovered} {
		want[o.Type()] = events.RunSubject(o, "<id>")
	}
	for _, s := range []events.BreakerState{events.BreakerOpen, events.BreakerHalfOpen, events.BreakerClosed} {
		want[s.Type()] = events.BreakerSubject(s, "<key>")
	}
	for _, s := range []events.RuntimeStatus{events.RuntimeOnline, events.RuntimeOffline} {
		want[s.Type()] = events.RuntimeSubject(s, "<kind>", "<name>")
	}
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		typ := strings.Trim(r[0], "`")
		subject, ok := want[typ]
		if !ok {
			t.Errorf("docs/events.md lists %s, which is not an event type flyball has", typ)
			continue
		}
		seen[typ] = true
		subjects := codes(r[1])
		if !slices.Contains(subjects, subject) {
			t.Errorf("%s: docs say %q, the builder makes %s", typ, r[1], subject)
		}
		i := slices.IndexFunc(cfgs, func(c jetstream.StreamConfig) bool { return c.Name == r[2] })
		if i < 0 {
			t.Errorf("%s: stream %q is not defined", typ, r[2])
			continue
		}
		for _, s := range subjects {
			sample := regexp.MustCompile(`<[a-z]+>`).ReplaceAllString(s, "x")
			if !slices.ContainsFunc(cfgs[i].Subjects, func(f string) bool { return subjectMatches(f, sample) }) {
				t.Errorf("%s: subject %s is not taken by stream %s (%q)", typ, s, r[2], cfgs[i].Subjects)
			}
		}
	}
	for typ := range want {
		if !seen[typ] {
			t.Errorf("event type %s is not in the catalog of docs/events.md", typ)
		}
	}
}

// subjectMatches reports whether a NATS subject filter (with * and >)
// matches a literal subject.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(f) == len(s)
}

// TestDecisionSourceTables: docs/governor.md lists every decision source,
// in precedence order (governor.AllSources), and the catalog's table in
// docs/events.md lists each as produced; only `unchanged` is reserved.
func TestDecisionSourceTables(t *testing.T) {
	t.Parallel()
	root := docexamples.Root(t)
	var want []string
	for _, s := range gov.AllSources() {
		want = append(want, string(s))
	}
	rows, err := docexamples.Table(root, "docs/governor.md", "| source | rule |")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, strings.Trim(r[0], "`"))
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/governor.md sources, in order:\n got  %q\n want %q (governor.AllSources)", got, want)
	}
	rows, err = docexamples.Table(root, "docs/events.md", "| source | meaning |")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, r := range rows {
		listed[strings.Trim(r[0], "`")] = r[2]
	}
	for _, s := range want {
		produced, ok := listed[s]
		switch {
		case !ok:
			t.Errorf("docs/events.md does not list source %s", s)
		case s == string(gov.SourceDeleted):
			// only in the task.accepted answer to a delete
		case produced != "yes":
			t.Errorf("docs/events.md says source %s is produced %q", s, produced)
		}
		delete(listed, s)
	}
	for s, produced := range listed {
		if s != "unchanged" || produced != "no" {
			t.Errorf("docs/events.md lists source %s (produced %q), which the governor does not have", s, produced)
		}
	}
}

// TestOperationsLogMessageTable: every log message the triage table of
// docs/operations.md tells operators to grep for is one a service logs,
// so a reworded message cannot leave the table pointing at nothing.
func TestOperationsLogMessageTable(t *testing.T) {
	t.Parallel()
	root := docexamples.Root(t)
	rows, err := docexamples.Table(root, "docs/operations.md", "| message | what it means |")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	err = filepath.WalkDir(filepath.Join(root, "services"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		src.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	code := src.String()
	msgRE := regexp.MustCompile("^`([^`]+)`")
	for _, r := range rows {
		m := msgRE.FindStringSubmatch(r[0])
		if m == nil {
			t.Errorf("row %q: the message cell does not start with a `message`", r[0])
			continue
		}
		msg := m[1]
		// A message built from a prefix (kind + " not confirmed; …") is
		// found by the literal after its first word.
		_, rest, _ := strings.Cut(msg, " ")
		if !strings.Contains(code, `"`+msg+`"`) && (rest == "" || !strings.Contains(code, `" `+rest+`"`)) {
			t.Errorf("docs/operations.md names the log message %q, which no service logs", msg)
		}
	}
	if len(rows) < 5 {
		t.Fatalf("found %d log messages, want at least 5", len(rows))
	}
}
