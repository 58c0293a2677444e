package events

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flyballhq/flyball/pkg/cron"
)

// TaskSpec is a recurring task: what to call and on which baseline cadence,
// plus the policies the governor and executor apply. It is the data of
// task.created and task.updated events and the value stored in KV
// flyball-tasks after acceptance. Field names are camelCase; durations are
// Go duration strings. The smallest valid spec is
//
//	{"id": "x", "target": {"http": {"url": "https://…"}}, "schedule": {"interval": "30s"}}
//
// Absent fields take the defaults documented on each field and filled in by
// [TaskSpec.Normalize].
type TaskSpec struct {
	// ID is the task's identity and subject token: 1-128 of [A-Za-z0-9_-].
	ID string `json:"id"`
	// Job groups related tasks; free text, at most 128 bytes.
	Job string `json:"job,omitempty"`
	// Labels are free key/value pairs for filtering; at most 32 entries.
	Labels map[string]string `json:"labels,omitempty"`
	// Target is what a run calls. Exactly one of HTTP or NATS is set.
	Target Target `json:"target"`
	// Schedule is the baseline cadence.
	Schedule Schedule `json:"schedule"`
	// StartAt, if set, is the first run time; it overrides the first-run rule
	// (interval tasks run at once, cron tasks at their next occurrence).
	StartAt *time.Time `json:"startAt,omitempty"`
	// Jitter spreads runs by up to this fraction of the interval, in [0, 0.5].
	// Defaults to 0 (no jitter).
	Jitter float64 `json:"jitter,omitempty"`
	// Bounds clamps every computed interval.
	Bounds *Bounds `json:"bounds,omitempty"`
	// Adaptive opts the task into adaptive cadence.
	Adaptive *Adaptive `json:"adaptive,omitempty"`
	// Activity scales the cadence by how recently the task saw activity.
	Activity *Activity `json:"activity,omitempty"`
	// QuietHours is a daily local-time window with its own interval.
	QuietHours *QuietHours `json:"quietHours,omitempty"`
	// Budget caps the runs counted in the current UTC hour and the 23
	// before it (whole UTC hours, not any rolling 24 hours), and spaces
	// runs at least 24h / maxRunsPerDay apart.
	Budget *Budget `json:"budget,omitempty"`
	// Retry governs attempts of one run. Defaults to 5 attempts, 5s ×2 up to 5m, ±20 %.
	Retry *Retry `json:"retry,omitempty"`
	// Breaker governs the task's circuit breaker. Defaults to 3 failures, 5s ×2 up to 5m.
	Breaker *BreakerPolicy `json:"breaker,omitempty"`
	// CatchUp is what happens to slots missed while flyball was down: "skip"
	// (run once now, then resume), "none" (wait for the next slot) or "all"
	// (backfill, capped by CatchUpMax). Defaults to "skip".
	CatchUp string `json:"catchUp,omitempty"`
	// CatchUpMax caps backfilled runs with CatchUp "all". Defaults to 100.
	CatchUpMax int `json:"catchUpMax,omitempty"`
	// DeadLetter governs what happens after a run is dead-lettered.
	DeadLetter *DeadLetterPolicy `json:"deadLetter,omitempty"`
}

// Target is what a run calls. Exactly one field is set.
type Target struct {
	HTTP *HTTPTarget `json:"http,omitempty"`
	NATS *NATSTarget `json:"nats,omitempty"`
}

// HTTPTarget is an HTTP call.
type HTTPTarget struct {
	// Method defaults to GET.
	Method string `json:"method,omitempty"`
	// URL is absolute, http or https, with a host name (not a port
	// alone: http://:8080), a port, if given, in 1-65535, and no user
	// info.
	URL string `json:"url"`
	// Headers are sent with every call. Authorization-like headers are
	// redacted in run records.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is sent as the request body.
	Body string `json:"body,omitempty"`
	// Timeout bounds one call, in (0, 30m]. Defaults to 30s.
	Timeout Duration `json:"timeout,omitempty"`
	// MaxResponseBytes bounds the body kept in run records, in [1, 10 MiB].
	// Longer bodies are truncated and flagged. Defaults to 102400, also
	// when 0 (a 0 given in JSON is refused as the spec is decoded).
	MaxResponseBytes int64 `json:"maxResponseBytes,omitempty"`
	// ExpectStatus lists the statuses that count as success: codes ("204")
	// or classes ("2xx"). Defaults to ["2xx"].
	ExpectStatus []string `json:"expectStatus,omitempty"`
}

// NATSTarget is a NATS request/reply call.
type NATSTarget struct {
	// Subject is a concrete subject (no wildcards) outside the reserved
	// namespaces (ReservedNATSSubject).
	Subject string `json:"subject"`
	// Payload is the request body.
	Payload string `json:"payload,omitempty"`
	// Timeout bounds one request, in (0, 30m]. Defaults to 5s.
	Timeout Duration `json:"timeout,omitempty"`
}

// Schedule is the baseline cadence: exactly one of Interval or Cron.
type Schedule struct {
	// Interval is a fixed period, at least 1s.
	Interval Duration `json:"interval,omitempty"`
	// Cron is a 5-field, 6-field (with seconds) or @shortcut expression.
	Cron string `json:"cron,omitempty"`
	// Timezone is the IANA zone the cron expression is evaluated in.
	// Defaults to UTC.
	Timezone string `json:"timezone,omitempty"`
}

// Bounds are hard limits on the interval between runs.
type Bounds struct {
	Min Duration `json:"min,omitempty"`
	Max Duration `json:"max,omitempty"`
}

// Adaptive cadence modes.
const (
	AdaptiveChange    = "change"
	AdaptiveStaleness = "staleness"
)

// Adaptive tunes the cadence from results.
type Adaptive struct {
	// Mode is "change" (tighten on changed responses or errors, relax after
	// unchanged runs) or "staleness" (tighten as the last success ages
	// toward Target).
	Mode string `json:"mode"`
	// UnchangedRuns is how many unchanged runs in a row relax the cadence.
	// Defaults to 3.
	UnchangedRuns int `json:"unchangedRuns,omitempty"`
	// Target is the staleness goal for mode "staleness". Defaults to the
	// baseline interval × 3.
	Target Duration `json:"target,omitempty"`
	// Smoothing is the EMA weight of a new observation, in (0, 1]. Defaults to 0.5.
	Smoothing float64 `json:"smoothing,omitempty"`
}

// Activity scales the cadence by the time since the last activity signal
// (the task's creation, a hint or a changed response).
type Activity struct {
	// IdleAfter switches to the idle multiplier. Defaults to 1h.
	IdleAfter Duration `json:"idleAfter,omitempty"`
	// DormantAfter switches to the dormant multiplier. Defaults to 24h.
	DormantAfter Duration `json:"dormantAfter,omitempty"`
	// IdleMultiplier stretches the interval when idle, >= 1. Defaults to 2.
	IdleMultiplier float64 `json:"idleMultiplier,omitempty"`
	// DormantMultiplier stretches the interval when dormant, >= 1. Defaults to 6.
	DormantMultiplier float64 `json:"dormantMultiplier,omitempty"`
}

// QuietHours is a daily window, in local time, with its own interval.
type QuietHours struct {
	Start    string   `json:"start"`
	End      string   `json:"end"`
	Timezone string   `json:"timezone,omitempty"`
	Interval Duration `json:"interval"`
}

// Budget caps runs, not calls: a run that made a call counts once (succeeded
// or failed, however many attempts it made; a skipped run does not). The
// governor counts runs per UTC hour, in the hour they started (of their
// slot when the start is unknown): once the
// current UTC hour and the 23 before it hold MaxRunsPerDay runs, the next
// run waits for the hour in which the oldest of them leaves that window.
// The window is whole UTC hours, not any rolling 24 hours: runs at 09:59
// and 10:59 leave it at 09:00 and 10:00 the next day, so a budget of 2
// allows a third run at 09:00, 23h01m after the first. Pacing (runs at
// least 24h / MaxRunsPerDay apart, measured from the slot, or from the
// start of a run started more than half that after its slot, so a retry
// or executor lag keeps the grid) keeps a steady stream at the budget's
// rate; the window above bounds the total.
type Budget struct {
	MaxRunsPerDay int `json:"maxRunsPerDay"`
}

// Retry governs the attempts of one run.
type Retry struct {
	// MaxAttempts is the number of calls per run, in [1, 20]. Defaults to 5.
	// (The DISPATCH consumer's MaxDeliver of 50 leaves room for crash
	// redeliveries on top; breaker deferrals use no delivery.)
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// InitialDelay is the first backoff, >= 100ms. Defaults to 5s.
	InitialDelay Duration `json:"initialDelay,omitempty"`
	// Multiplier grows the backoff per attempt, in [1, 10]. Defaults to 2.
	Multiplier float64 `json:"multiplier,omitempty"`
	// MaxDelay caps the backoff, >= InitialDelay. Defaults to 5m.
	MaxDelay Duration `json:"maxDelay,omitempty"`
	// Jitter is the ± fraction applied to each delay, in [0, 1). Defaults to 0.2.
	Jitter *float64 `json:"jitter,omitempty"`
}

// BreakerPolicy governs the task's circuit breaker.
type BreakerPolicy struct {
	// FailureThreshold is the consecutive failed attempts that open the
	// breaker, in [1, 1000]. Defaults to 3.
	FailureThreshold int `json:"failureThreshold,omitempty"`
	// OpenDelay is the first open period, >= 100ms. Defaults to 5s.
	OpenDelay Duration `json:"openDelay,omitempty"`
	// MaxOpenDelay caps the doubling open period. Defaults to 5m.
	MaxOpenDelay Duration `json:"maxOpenDelay,omitempty"`
	// Scope is "task" (one breaker per task) or "host" (shared by every
	// task calling the same host). Defaults to "task".
	Scope string `json:"scope,omitempty"`
}

// DeadLetterPolicy governs dead-lettered tasks.
type DeadLetterPolicy struct {
	// RecheckAfter is when the governor schedules a recheck run after a
	// dead-letter, >= 1s. Defaults to 30m.
	RecheckAfter Duration `json:"recheckAfter,omitempty"`
}

// Catch-up policies.
const (
	CatchUpSkip = "skip"
	CatchUpNone = "none"
	CatchUpAll  = "all"
)

// Limits and defaults of the spec.
const (
	MinInterval             = time.Second
	MaxInterval             = 366 * 24 * time.Hour
	DefaultHTTPTimeout      = 30 * time.Second
	DefaultNATSTimeout      = 5 * time.Second
	MaxTargetTimeout        = 30 * time.Minute
	DefaultMaxResponseBytes = 100 * 1024
	MaxMaxResponseBytes     = 10 << 20
	DefaultMaxAttempts      = 5
	MaxAttempts             = 20
	DefaultRetryDelay       = 5 * time.Second
	DefaultRetryMultiplier  = 2.0
	DefaultRetryMaxDelay    = 5 * time.Minute
	DefaultRetryJitter      = 0.2
	DefaultFailureThreshold = 3
	DefaultOpenDelay        = 5 * time.Second
	DefaultMaxOpenDelay     = 5 * time.Minute
	DefaultRecheckAfter     = 30 * time.Minute
	DefaultCatchUpMax       = 100
	DefaultUnchangedRuns    = 3
	DefaultSmoothing        = 0.5
)

var (
	httpMethods  = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	statusRe     = regexp.MustCompile(`^([1-5][0-9][0-9]|[1-5]xx)$`)
	clockRe      = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9]$`)
	natsSubjToks = regexp.MustCompile(`^[^\s.*>]+$`)
)

// Validate checks every field and returns a *ValidationError listing every
// problem, or nil. Each message names the field and the rule, for example
// "schedule.interval: must be >= 1s, got 200ms".
func (s *TaskSpec) Validate() error { return s.validate(false) }

// ValidateStored is Validate for a spec already stored, which the executor
// checks again before it runs one: it leaves out the rules added for new
// specs only, each of which refuses something a task stored before it
// may run with today, and a rule that refuses what used to run must not
// stop such a task after an upgrade. They are the connection-level
// headers (refused because every call to an HTTP/2 target fails, while
// an HTTP/1.1 target answers), the cap on bounds.min, bounds.max and
// deadLetter.recheckAfter, the spelling of time zones (a name such as "localtime" loads where the
// host has zoneinfo), and "=" in a label key (no label selector matches
// it). task.created and task.updated are held to Validate,
// but for the sweeper's repair of a task with no schedule when it carries
// the spec stored (RepairCreatePrefix, DecodeStoredTaskSpec): the sweeper
// checks that spec with ValidateStored, and the governor too. A rule that
// refuses only what no call ever reached (a target.http.url with no host
// name or a port outside 1-65535) is one of both: the executor skips each
// run of such a stored spec, naming the rule, where every call failed.
func (s *TaskSpec) ValidateStored() error { return s.validate(true) }

func (s *TaskSpec) validate(stored bool) error {
	c := collector{stored: stored}
	if !ValidToken(s.ID) {
		c.add("id", fmt.Sprintf("must be 1-%d characters of [A-Za-z0-9_-], got %q", MaxIDLength, truncate(s.ID, 64)))
	} else if strings.HasPrefix(s.ID, HostKeyPrefix) {
		c.add("id", fmt.Sprintf("must not start with %q, which names host-scoped breakers, got %q", HostKeyPrefix, truncate(s.ID, 64)))
	}
	if len(s.Job) > MaxIDLength {
		c.add("job", fmt.Sprintf("must be at most %d bytes, got %d", MaxIDLength, len(s.Job)))
	}
	if len(s.Labels) > 32 {
		c.add("labels", fmt.Sprintf("must have at most 32 entries, got %d", len(s.Labels)))
	}
	for k, v := range s.Labels {
		if k == "" || len(k) > 63 || len(v) > 256 {
			c.add("labels."+truncate(k, 64), "keys must be 1-63 bytes and values at most 256 bytes")
		}
		// A label selector (the API's ?label=, the CLI's --label) is
		// key=value, split at the first "=": no selector matched a key
		// that holds one. A new rule, so a stored spec keeps such a key.
		if strings.Contains(k, "=") && !c.stored {
			c.add("labels", fmt.Sprintf(`key %q must not contain "=": a label selector is key=value, split at the first "="`, truncate(k, 64)))
		}
	}
	s.validateTarget(&c)
	s.validateSchedule(&c)
	if s.StartAt != nil && !TimeInRange(*s.StartAt) {
		c.add("startAt", TimeRangeRule(*s.StartAt))
	}
	if s.Jitter < 0 || s.Jitter > 0.5 || s.Jitter != s.Jitter {
		c.add("jitter", fmt.Sprintf("must be in [0, 0.5], got %g", s.Jitter))
	}
	if b := s.Bounds; b != nil {
		if b.Min != 0 && b.Min.D() < MinInterval {
			c.add("bounds.min", fmt.Sprintf("must be >= %s, got %s", MinInterval, b.Min))
		}
		if b.Max != 0 && b.Max.D() < MinInterval {
			c.add("bounds.max", fmt.Sprintf("must be >= %s, got %s", MinInterval, b.Max))
		}
		// Past MaxInterval an adaptive relax toward bounds.max planned a
		// slot after 2262, which the timer cannot queue: the task stopped
		// running without a word.
		if b.Min.D() > MaxInterval && !c.stored {
			c.add("bounds.min", fmt.Sprintf("must be <= %s, got %s", MaxInterval, b.Min))
		}
		if b.Max.D() > MaxInterval && !c.stored {
			c.add("bounds.max", fmt.Sprintf("must be <= %s, got %s", MaxInterval, b.Max))
		}
		if b.Min != 0 && b.Max != 0 && b.Max < b.Min {
			c.add("bounds.max", fmt.Sprintf("must be >= bounds.min (%s), got %s", b.Min, b.Max))
		}
	}
	s.validatePolicies(&c)
	return c.err()
}

func (s *TaskSpec) validateTarget(c *collector) {
	h, n := s.Target.HTTP, s.Target.NATS
	switch {
	case h == nil && n == nil:
		c.add("target", "must set exactly one of http or nats, got neither")
	case h != nil && n != nil:
		c.add("target", "must set exactly one of http or nats, got both")
	}
	if h != nil {
		if h.Method != "" && !slices.Contains(httpMethods, h.Method) {
			c.add("target.http.method", fmt.Sprintf("must be one of %s, got %q", strings.Join(httpMethods, ", "), truncate(h.Method, 32)))
		}
		u, err := url.Parse(h.URL)
		switch {
		case h.URL == "":
			c.add("target.http.url", "is required")
		case err != nil:
			c.add("target.http.url", "must be a valid URL: "+urlProblem(err))
		case u.Scheme != "http" && u.Scheme != "https":
			c.add("target.http.url", fmt.Sprintf("scheme must be http or https, got %q", truncate(u.Scheme, 32)))
		case u.Host == "":
			c.add("target.http.url", "must have a host")
		case u.User != nil:
			c.add("target.http.url", "must not embed credentials; use target.http.headers")
		default:
			// Not a rule for new specs only: no call to such a URL
			// was ever made.
			if rule := hostPortProblem(h.URL, u); rule != "" {
				c.add("target.http.url", rule)
			}
		}
		// net/http refuses to send what these reject, on every attempt,
		// over HTTP/1.1 or HTTP/2 (whichever the target speaks), or drops
		// it without a word.
		for k, v := range h.Headers {
			switch {
			case !validHeaderName(k):
				c.add("target.http.headers", fmt.Sprintf("invalid header name %q: must be letters, digits and !#$%%&'*+-.^_`|~", truncate(k, 64)))
			case !validHeaderValue(v):
				c.add("target.http.headers", fmt.Sprintf("invalid value of header %q: must not hold a control character other than tab (CR, LF, NUL, DEL)", truncate(k, 64)))
			case c.stored: // a rule for new specs only
			default:
				if rule := connHeaderProblem(k, v); rule != "" {
					c.add("target.http.headers."+truncate(k, 64), rule)
				}
			}
		}
		checkHeaderCase(c, h.Headers)
		checkTimeout(c, "target.http.timeout", h.Timeout)
		// 0 is the field left out (the default); an explicit 0 in JSON is
		// refused when the spec is decoded (explicitZero).
		if h.MaxResponseBytes < 0 || h.MaxResponseBytes > MaxMaxResponseBytes {
			c.add("target.http.maxResponseBytes", fmt.Sprintf("must be in [1, %d], got %d", MaxMaxResponseBytes, h.MaxResponseBytes))
		}
		for i, st := range h.ExpectStatus {
			if !statusRe.MatchString(st) {
				c.add(fmt.Sprintf("target.http.expectStatus[%d]", i), fmt.Sprintf("must be a status code like \"204\" or a class like \"2xx\", got %q", truncate(st, 32)))
			}
		}
	}
	if n != nil {
		switch {
		case !validNATSSubject(n.Subject):
			c.add("target.nats.subject", fmt.Sprintf("must be a concrete NATS subject without wildcards, got %q", truncate(n.Subject, 64)))
		case ReservedNATSSubject(n.Subject):
			c.add("target.nats.subject", fmt.Sprintf("must not be a flyball subject (flyball.>), a system subject ($JS.>, $KV.>, any first token starting with $) or a reply subject (_INBOX…, _R_.>, _GR_.>), got %q", truncate(n.Subject, 64)))
		}
		checkTimeout(c, "target.nats.timeout", n.Timeout)
	}
}

// hostPortProblem is the rule a parsed http(s) URL with a host breaks,
// or "": a port with no host name (http://:8080, whose u.Host is ":8080",
// which net/http dials as ":8080" and the executor's SSRF guard refuses
// as "bad address"), or a port outside 1-65535 (net/http refuses a larger
// one, "invalid port", and nothing listens on port 0). Every call to such
// a URL fails, so a stored spec is held to it too. The host or port is
// quoted unless the URL may hold a password cut short by a "/", "?" or
// "#" (an "@" after the host url.Parse found), whose start url.Parse
// then reads as the host and port: this reason goes into task.rejected
// and run.skipped events and the executor's log (urlProblem).
func hostPortProblem(raw string, u *url.URL) string {
	// A password cut short: url.Parse found no user info, yet the URL
	// holds an "@".
	cut := u.User == nil && strings.Contains(raw, "@")
	const cutHint = ` (a "/", "?" or "#" in a password ends the host early; put credentials in target.http.headers)`
	if u.Hostname() == "" {
		if cut {
			return "must have a host name" + cutHint
		}
		return fmt.Sprintf("must have a host name, got %q", truncate(u.Host, 64))
	}
	// url.Parse leaves only digits in a port; "" is the scheme's default.
	p := u.Port()
	if p == "" {
		return ""
	}
	if n, err := strconv.ParseUint(p, 10, 16); err == nil && n > 0 {
		return ""
	}
	if cut {
		return "port must be 1-65535" + cutHint
	}
	if p = strings.TrimLeft(p, "0"); p == "" {
		p = "0"
	}
	return "port must be 1-65535, got " + truncate(p, 32)
}

// urlProblem says in general terms what is wrong with a URL that
// url.Parse refused. It never quotes the URL: url.Parse's error quotes it
// whole, and its cause may quote part of it (a password holding a "/"
// ends the host early and is quoted as a port: `invalid port ":hunter2"
// after host`), and this reason goes into task.rejected and run.skipped
// events and the executor's log.
func urlProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var escape url.EscapeError
	var host url.InvalidHostError
	switch msg := err.Error(); {
	case errors.As(err, &escape):
		return "it holds a % not followed by two hex digits"
	case errors.As(err, &host):
		return "its host holds a character a host may not"
	case strings.HasPrefix(msg, "invalid port "):
		return `the host is followed by a port that is not a number (a "/", "?" or "#" in a password ends the host early; put credentials in target.http.headers)`
	case msg == "missing protocol scheme":
		return "it has no scheme (http:// or https://)"
	case msg == "first path segment in URL cannot contain colon":
		return "it has no scheme and a colon in its first path segment"
	case strings.Contains(msg, "control character"):
		return "it holds a control character"
	case strings.Contains(msg, "userinfo"):
		return "its user info holds a character it may not (put credentials in target.http.headers)"
	case strings.Contains(msg, "IP-literal"), strings.Contains(msg, "missing ']'"), strings.HasPrefix(msg, "invalid host"):
		return "its host in brackets is not an IPv6 address"
	}
	return "it does not parse"
}

// validHeaderName reports whether name is an HTTP token (RFC 9110 tchar),
// as net/http requires of a header name it sends.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// connHeaderProblem is the rule a header named name (a valid token) with
// value v breaks, or "": the connection-level values Go's HTTP/2
// transport refuses to send ("http2: invalid Upgrade request header"),
// or that an HTTP/2 server refuses (TE), so that a call carrying one
// failed on every attempt against an HTTP/2 target. The connection-level
// headers it drops instead (Keep-Alive, Proxy-Connection, Transfer-Encoding:
// chunked) and those net/http sets itself (Content-Length, Trailer) are
// accepted as before: the executor re-validates stored specs, and a task
// that runs today must not be skipped after an upgrade.
func connHeaderProblem(name, v string) string {
	switch strings.ToLower(name) {
	case "upgrade":
		return "is a connection-level header, which HTTP/2 forbids: Go's transport refuses to send a request carrying it; the executor manages connections itself"
	case "connection":
		// Go accepts these two over HTTP/2 (and drops them); over
		// HTTP/1.1 "close" closes the connection after the call.
		if strings.EqualFold(v, "close") || strings.EqualFold(v, "keep-alive") {
			return ""
		}
		return fmt.Sprintf(`must be "close" or "keep-alive", the values Go's HTTP/2 transport accepts (it refuses the request with any other), got %q`, truncate(v, 64))
	case "transfer-encoding":
		if strings.EqualFold(v, "chunked") {
			return ""
		}
		return fmt.Sprintf(`must be "chunked" if set (net/http picks the framing from the body, and Go's HTTP/2 transport refuses the request with any other value), got %q`, truncate(v, 64))
	case "te":
		if v == "trailers" {
			return ""
		}
		return fmt.Sprintf(`must be "trailers", the only value HTTP/2 allows (a Go server answers 400 to any other), got %q`, truncate(v, 64))
	case "host":
		if !validHostHeader(v) {
			return fmt.Sprintf(`must be a host or host:port of ASCII letters, digits and -._~!$&'()*+,;=:[]%% (write an internationalized name in punycode, xn--…), got %q`, truncate(v, 64))
		}
	}
	return ""
}

// validHostHeader reports whether net/http sends v as the Host (HTTP/1.1
// sent an empty Host instead, and HTTP/2 refused the request: "http2:
// invalid Host header"). The bytes are httpguts.ValidHostHeader's; a
// non-ASCII name, which net/http would convert to punycode, is refused
// too, so that what is sent is what the spec says.
func validHostHeader(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:[]%", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether net/http sends v as a header value: no
// control character but tab (a CR or LF would end the header).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func checkTimeout(c *collector, field string, d Duration) {
	if d < 0 || d.D() > MaxTargetTimeout {
		c.add(field, fmt.Sprintf("must be in (0, %s], got %s", MaxTargetTimeout, d))
	}
}

// ReservedNATSSubject reports whether a NATS target may not use subject:
// flyball's own subjects (flyball.>), the server's ($JS.>, $KV.>, $SYS.>
// and every other first token starting with $), and reply subjects
// (_INBOX…, _R_.>, _GR_.>). The executor sends a target's request on its
// own connection, which must be allowed to publish run events, write its
// KV buckets and ack dispatches: a target there would let a task forge a
// run of another task, write flyball's KV buckets, call the JetStream API
// (purge or delete a stream) or answer another request.
func ReservedNATSSubject(subject string) bool {
	first, _, _ := strings.Cut(subject, ".")
	return first == SubjectRoot || strings.HasPrefix(first, "$") ||
		strings.HasPrefix(first, "_INBOX") || first == "_R_" || first == "_GR_"
}

func validNATSSubject(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if !natsSubjToks.MatchString(tok) {
			return false
		}
	}
	return true
}

// cronReference is where validation looks for a cron expression's first
// activation. cron.Next searches one whole cycle of the calendar (400
// years, weekdays included), so an expression has one after it exactly
// when it fires at all: the answer does not depend on the time of
// validation, nor on the time zone.
var cronReference = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func (s *TaskSpec) validateSchedule(c *collector) {
	sc := s.Schedule
	switch {
	case sc.Interval == 0 && sc.Cron == "":
		// An interval of "0s" decodes as none; naming the least interval
		// tells the author who wrote one what is wrong with it.
		c.add("schedule", fmt.Sprintf("must set exactly one of interval (%s or more) or cron, got neither", MinInterval))
	case sc.Interval != 0 && sc.Cron != "":
		c.add("schedule", "must set exactly one of interval or cron, got both")
	}
	if sc.Interval != 0 {
		switch {
		case sc.Interval.D() < MinInterval:
			c.add("schedule.interval", fmt.Sprintf("must be >= %s, got %s", MinInterval, sc.Interval))
		case sc.Interval.D() > MaxInterval:
			c.add("schedule.interval", fmt.Sprintf("must be <= %s, got %s", MaxInterval, sc.Interval))
		}
	}
	if sc.Cron != "" {
		if sched, err := cron.Parse(sc.Cron); err != nil {
			c.add("schedule.cron", err.Error())
		} else if sched.Next(cronReference, time.UTC).IsZero() {
			// Accepted, such a task was never scheduled, and nothing
			// would ever decide for it again.
			c.add("schedule.cron", fmt.Sprintf("never fires: no date matches %q (such as February 30 or April 31)", truncate(sc.Cron, 64)))
		}
	}
	if sc.Timezone != "" {
		c.zone("schedule.timezone", sc.Timezone)
	}
}

func (s *TaskSpec) validatePolicies(c *collector) {
	if a := s.Adaptive; a != nil {
		if a.Mode != AdaptiveChange && a.Mode != AdaptiveStaleness {
			c.add("adaptive.mode", fmt.Sprintf("must be %q or %q, got %q", AdaptiveChange, AdaptiveStaleness, truncate(a.Mode, 32)))
		}
		if a.UnchangedRuns < 0 || a.UnchangedRuns > 1000 {
			c.add("adaptive.unchangedRuns", fmt.Sprintf("must be in [1, 1000], got %d", a.UnchangedRuns))
		}
		if a.Target < 0 {
			c.add("adaptive.target", fmt.Sprintf("must be positive, got %s", a.Target))
		}
		if a.Smoothing < 0 || a.Smoothing > 1 || a.Smoothing != a.Smoothing {
			c.add("adaptive.smoothing", fmt.Sprintf("must be in (0, 1], got %g", a.Smoothing))
		}
	}
	if a := s.Activity; a != nil {
		// Compare with the idleAfter in force after Normalize, so a spec
		// that validates still validates once normalized.
		idle := a.IdleAfter
		if idle == 0 {
			idle = Duration(time.Hour)
		}
		switch {
		case a.IdleAfter < 0:
			c.add("activity.idleAfter", fmt.Sprintf("must not be negative, got %s", a.IdleAfter))
		case a.DormantAfter < 0:
			c.add("activity.dormantAfter", fmt.Sprintf("must not be negative, got %s", a.DormantAfter))
		case a.DormantAfter != 0 && a.DormantAfter < idle:
			c.add("activity.dormantAfter", fmt.Sprintf("must be >= activity.idleAfter (%s), got %s", idle, a.DormantAfter))
		}
		if (a.IdleMultiplier != 0 && a.IdleMultiplier < 1) || a.IdleMultiplier > 1000 {
			c.add("activity.idleMultiplier", fmt.Sprintf("must be in [1, 1000], got %g", a.IdleMultiplier))
		}
		if (a.DormantMultiplier != 0 && a.DormantMultiplier < 1) || a.DormantMultiplier > 1000 {
			c.add("activity.dormantMultiplier", fmt.Sprintf("must be in [1, 1000], got %g", a.DormantMultiplier))
		}
	}
	if q := s.QuietHours; q != nil {
		if !clockRe.MatchString(q.Start) {
			c.add("quietHours.start", fmt.Sprintf("must be HH:MM (24h), got %q", truncate(q.Start, 16)))
		}
		if !clockRe.MatchString(q.End) {
			c.add("quietHours.end", fmt.Sprintf("must be HH:MM (24h), got %q", truncate(q.End, 16)))
		}
		if q.Timezone != "" {
			c.zone("quietHours.timezone", q.Timezone)
		}
		if q.Interval.D() < MinInterval || q.Interval.D() > MaxInterval {
			c.add("quietHours.interval", fmt.Sprintf("must be in [%s, %s], got %s", MinInterval, MaxInterval, q.Interval))
		}
	}
	if b := s.Budget; b != nil && (b.MaxRunsPerDay < 1 || b.MaxRunsPerDay > 86400) {
		c.add("budget.maxRunsPerDay", fmt.Sprintf("must be in [1, 86400], got %d", b.MaxRunsPerDay))
	}
	if r := s.Retry; r != nil {
		if r.MaxAttempts < 0 || r.MaxAttempts > MaxAttempts {
			c.add("retry.maxAttempts", fmt.Sprintf("must be in [1, %d], got %d", MaxAttempts, r.MaxAttempts))
		}
		// initial is the delay in force after Normalize; maxDelay (explicit,
		// or defaulted to max(5m, initialDelay)) must stay in [initial, 24h].
		initial := r.InitialDelay
		if initial == 0 {
			initial = Duration(DefaultRetryDelay)
		}
		switch {
		case r.InitialDelay != 0 && r.InitialDelay.D() < 100*time.Millisecond:
			c.add("retry.initialDelay", fmt.Sprintf("must be >= 100ms, got %s", r.InitialDelay))
		case r.InitialDelay.D() > 24*time.Hour:
			c.add("retry.initialDelay", fmt.Sprintf("must be <= 24h, got %s", r.InitialDelay))
		}
		if r.Multiplier != 0 && (r.Multiplier < 1 || r.Multiplier > 10) {
			c.add("retry.multiplier", fmt.Sprintf("must be in [1, 10], got %g", r.Multiplier))
		}
		if r.MaxDelay < 0 || (r.MaxDelay != 0 && r.MaxDelay < initial) || r.MaxDelay.D() > 24*time.Hour {
			c.add("retry.maxDelay", fmt.Sprintf("must be in [retry.initialDelay, 24h], got %s", r.MaxDelay))
		}
		if r.Jitter != nil && (*r.Jitter < 0 || *r.Jitter >= 1 || *r.Jitter != *r.Jitter) {
			c.add("retry.jitter", fmt.Sprintf("must be in [0, 1), got %g", *r.Jitter))
		}
	}
	if b := s.Breaker; b != nil {
		if b.FailureThreshold < 0 || b.FailureThreshold > 1000 {
			c.add("breaker.failureThreshold", fmt.Sprintf("must be in [1, 1000], got %d", b.FailureThreshold))
		}
		// As for retry: compare with the openDelay in force after Normalize.
		open := b.OpenDelay
		if open == 0 {
			open = Duration(DefaultOpenDelay)
		}
		switch {
		case b.OpenDelay != 0 && b.OpenDelay.D() < 100*time.Millisecond:
			c.add("breaker.openDelay", fmt.Sprintf("must be >= 100ms, got %s", b.OpenDelay))
		case b.OpenDelay.D() > 24*time.Hour:
			c.add("breaker.openDelay", fmt.Sprintf("must be <= 24h, got %s", b.OpenDelay))
		}
		if b.MaxOpenDelay < 0 || (b.MaxOpenDelay != 0 && b.MaxOpenDelay < open) || b.MaxOpenDelay.D() > 24*time.Hour {
			c.add("breaker.maxOpenDelay", fmt.Sprintf("must be in [breaker.openDelay, 24h], got %s", b.MaxOpenDelay))
		}
		if b.Scope != "" && b.Scope != "task" && b.Scope != "host" {
			c.add("breaker.scope", fmt.Sprintf("must be \"task\" or \"host\", got %q", truncate(b.Scope, 32)))
		}
	}
	switch s.CatchUp {
	case "", CatchUpSkip, CatchUpNone, CatchUpAll:
	default:
		c.add("catchUp", fmt.Sprintf("must be %q, %q or %q, got %q", CatchUpSkip, CatchUpNone, CatchUpAll, truncate(s.CatchUp, 32)))
	}
	if s.CatchUpMax < 0 || s.CatchUpMax > 10000 {
		c.add("catchUpMax", fmt.Sprintf("must be in [1, 10000], got %d", s.CatchUpMax))
	}
	if d := s.DeadLetter; d != nil && d.RecheckAfter != 0 && d.RecheckAfter.D() < time.Second {
		c.add("deadLetter.recheckAfter", fmt.Sprintf("must be >= 1s, got %s", d.RecheckAfter))
	}
	// Past MaxInterval a dead letter planned its recheck after 2262, which
	// the timer cannot queue: the task never ran again until a requeue. A
	// stored spec still loads; the governor rechecks it after MaxInterval.
	if d := s.DeadLetter; d != nil && d.RecheckAfter.D() > MaxInterval && !c.stored {
		c.add("deadLetter.recheckAfter", fmt.Sprintf("must be <= %s, got %s", MaxInterval, d.RecheckAfter))
	}
}

// UTCStartAt writes startAt in UTC: flyball stores and emits UTC, and a
// startAt given with an offset ("+02:00") is the same instant. Normalize
// calls it; a reader of a spec stored before it did calls it too.
func (s *TaskSpec) UTCStartAt() {
	if s.StartAt != nil && s.StartAt.Location() != time.UTC {
		u := s.StartAt.UTC()
		s.StartAt = &u
	}
}

// Normalize fills every absent field with its default, so the stored spec
// shows the values actually in force. Call it on a spec that validated.
func (s *TaskSpec) Normalize() {
	s.UTCStartAt()
	if h := s.Target.HTTP; h != nil {
		if h.Method == "" {
			h.Method = "GET"
		}
		if h.Timeout == 0 {
			h.Timeout = Duration(DefaultHTTPTimeout)
		}
		if h.MaxResponseBytes == 0 {
			h.MaxResponseBytes = DefaultMaxResponseBytes
		}
		if len(h.ExpectStatus) == 0 {
			h.ExpectStatus = []string{"2xx"}
		}
	}
	if n := s.Target.NATS; n != nil && n.Timeout == 0 {
		n.Timeout = Duration(DefaultNATSTimeout)
	}
	if s.Schedule.Cron != "" && s.Schedule.Timezone == "" {
		s.Schedule.Timezone = "UTC"
	}
	if s.Retry == nil {
		s.Retry = &Retry{}
	}
	r := s.Retry
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.InitialDelay == 0 {
		r.InitialDelay = Duration(DefaultRetryDelay)
	}
	if r.Multiplier == 0 {
		r.Multiplier = DefaultRetryMultiplier
	}
	if r.MaxDelay == 0 {
		r.MaxDelay = max(Duration(DefaultRetryMaxDelay), r.InitialDelay)
	}
	if r.Jitter == nil {
		j := DefaultRetryJitter
		r.Jitter = &j
	}
	if s.Breaker == nil {
		s.Breaker = &BreakerPolicy{}
	}
	b := s.Breaker
	if b.FailureThreshold == 0 {
		b.FailureThreshold = DefaultFailureThreshold
	}
	if b.OpenDelay == 0 {
		b.OpenDelay = Duration(DefaultOpenDelay)
	}
	if b.MaxOpenDelay == 0 {
		b.MaxOpenDelay = max(Duration(DefaultMaxOpenDelay), b.OpenDelay)
	}
	if b.Scope == "" {
		b.Scope = "task"
	}
	if s.CatchUp == "" {
		s.CatchUp = CatchUpSkip
	}
	if s.CatchUpMax == 0 {
		s.CatchUpMax = DefaultCatchUpMax
	}
	if s.DeadLetter == nil {
		s.DeadLetter = &DeadLetterPolicy{}
	}
	if s.DeadLetter.RecheckAfter == 0 {
		s.DeadLetter.RecheckAfter = Duration(DefaultRecheckAfter)
	}
	if a := s.Adaptive; a != nil {
		if a.UnchangedRuns == 0 {
			a.UnchangedRuns = DefaultUnchangedRuns
		}
		if a.Smoothing == 0 {
			a.Smoothing = DefaultSmoothing
		}
	}
	if a := s.Activity; a != nil {
		if a.IdleAfter == 0 {
			a.IdleAfter = Duration(time.Hour)
		}
		if a.DormantAfter == 0 {
			a.DormantAfter = max(Duration(24*time.Hour), a.IdleAfter)
		}
		if a.IdleMultiplier == 0 {
			a.IdleMultiplier = 2
		}
		if a.DormantMultiplier == 0 {
			a.DormantMultiplier = 6
		}
	}
	if q := s.QuietHours; q != nil && q.Timezone == "" {
		q.Timezone = "UTC"
	}
}

// StatusExpected reports whether an HTTP status counts as success under the
// target's ExpectStatus list (default 2xx).
func (h *HTTPTarget) StatusExpected(code int) bool {
	if len(h.ExpectStatus) == 0 {
		return code >= 200 && code < 300
	}
	cs := strconv.Itoa(code)
	for _, p := range h.ExpectStatus {
		if p == cs || (len(p) == 3 && p[1:] == "xx" && len(cs) == 3 && p[0] == cs[0]) {
			return true
		}
	}
	return false
}

// locations caches loaded zones: time.LoadLocation reads and parses a file
// on every call, and the governor evaluates cron schedules on a hot path.
var locations sync.Map

// zone checks a time zone field. A new spec must spell a zone as the zone
// is (canonicalZone), checked before the zone is loaded (and cached): a
// stored spec, checked again before it runs, only has to load.
func (c *collector) zone(field, name string) {
	if !c.stored && !canonicalZone(name) {
		c.add(field, fmt.Sprintf("must be an IANA time zone such as \"Europe/Berlin\", spelled as the zone is, got %q", truncate(name, 64)))
		return
	}
	if _, err := LoadLocation(name); err != nil {
		c.add(field, err.Error())
	}
}

// LoadLocation loads an IANA time zone, refusing the empty name and "Local"
// (which would make schedules depend on the host's configuration).
// time.LoadLocation reads the host's zoneinfo by path where there is one,
// so names that are not a zone's own ("localtime", "Europe/./Berlin",
// "posix/…") load on a host with /usr/share/zoneinfo and not in flyball's
// images, which have only Go's embedded zone data: a new spec's zone is
// checked for its spelling first (collector.zone), and a spec stored with
// such a name plans where it loads, as it did.
func LoadLocation(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("must be an IANA time zone such as \"Europe/Berlin\", got %q", truncate(name, 64))
	}
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown IANA time zone %q", truncate(name, 64))
	}
	locations.Store(name, loc)
	return loc, nil
}

// canonicalZone reports whether name is spelled as an IANA zone is:
// slash-separated parts of letters, digits and "_+-", none "." or "..",
// and not one of the host-only names of a zoneinfo directory.
func canonicalZone(name string) bool {
	if len(name) > 64 {
		return false
	}
	switch first, _, _ := strings.Cut(name, "/"); first {
	case "localtime", "posix", "right", "posixrules", "Factory":
		return false
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
			if !letter && (c < '0' || c > '9') && c != '_' && c != '+' && c != '-' {
				return false
			}
		}
	}
	return true
}

// checkHeaderCase refuses header names that differ only in case: HTTP
// names are case-insensitive, so "X-Token" and "x-token" are one header,
// and which value was sent depended on map order.
func checkHeaderCase(c *collector, headers map[string]string) {
	if len(headers) < 2 {
		return
	}
	names := slices.Sorted(maps.Keys(headers))
	first := make(map[string]string, len(names))
	for _, k := range names {
		lk := strings.ToLower(k)
		if other, ok := first[lk]; ok {
			c.add("target.http.headers", fmt.Sprintf("%q and %q are the same header (names are case-insensitive): keep one", truncate(other, 64), truncate(k, 64)))
			continue
		}
		first[lk] = k
	}
}
