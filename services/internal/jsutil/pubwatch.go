package jsutil

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PubViolation is the server's refusal of a publish: the connection's NATS
// user may not publish to Subject. PubWatch ends a watched request with it
// (context.Cause of the request's context).
type PubViolation struct{ Subject string }

func (v *PubViolation) Error() string {
	return "permissions violation: may not publish to " + v.Subject
}

// pubViolationRe finds the subject in the -ERR a refused publish draws,
// as nats.go reports it to the connection's error handler (wrapping
// nats.ErrPermissionViolation).
// The server quotes the subject as Go's %q does, so it is unquoted
// (a subject may hold a quote or a backslash).
var pubViolationRe = regexp.MustCompile(`Permissions Violation for Publish to ("(?:[^"\\]|\\.)*")`)

// PubWatch ends the requests in flight whose subject the server refused.
// The server answers a refused publish with an asynchronous -ERR, which
// nats.go hands to the connection's error handler only: the request
// itself hears nothing and waits out its whole timeout (a JetStream API
// request, 5 s by default). Install, called once before any watched
// request, sets a handler that passes it on to the one set before; Watch
// gives each request a context that the refusal of its subject cancels.
// The zero value is ready to use.
type PubWatch struct {
	mu      sync.Mutex
	waiting map[string]map[*int]context.CancelCauseFunc // subject -> requests in flight
}

// installMu makes each Install's read and set of a connection's error
// handler one step.
var installMu sync.Mutex

// Install wraps nc's asynchronous error handler: the violations it is
// handed end the watched requests, and every error still reaches the
// handler set before (nats.go's default prints it to stderr; flyball
// serve's logs it). Call it once, before the first watched request. The
// handler lives in the connection's options, so it outlasts reconnects.
// Nothing removes it: with no request watched it only passes errors on,
// and putting the old one back would drop a handler set after Install.
// Several PubWatches may be installed on one connection (services that
// share it): each passes every error on to the next.
func (w *PubWatch) Install(nc *nats.Conn) {
	// The read and the set are one step: two services installing on one
	// connection at once would otherwise both wrap the same handler, and
	// one wrapper would be lost.
	installMu.Lock()
	defer installMu.Unlock()
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		w.refused(err)
		if prev != nil {
			prev(c, sub, err)
		}
	})
}

// Watch returns ctx, cancelled with a *PubViolation if the server refuses
// a publish to subject before unwatch is called. It relies on Install.
// subject may hold wildcards, for a request whose subject names what it
// asks for (a direct get of a subject's last message): the refusal of any
// subject they match ends the watch, and the *PubViolation names that one.
// After a request made with it fails, Refusal tells a refusal from any
// other failure.
func (w *PubWatch) Watch(ctx context.Context, subject string) (_ context.Context, unwatch func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	key := new(int)
	w.mu.Lock()
	if w.waiting == nil {
		w.waiting = map[string]map[*int]context.CancelCauseFunc{}
	}
	if w.waiting[subject] == nil {
		w.waiting[subject] = map[*int]context.CancelCauseFunc{}
	}
	w.waiting[subject][key] = cancel
	w.mu.Unlock()
	return ctx, func() {
		w.mu.Lock()
		delete(w.waiting[subject], key)
		if len(w.waiting[subject]) == 0 {
			delete(w.waiting, subject)
		}
		w.mu.Unlock()
		cancel(nil)
	}
}

// Refusal is the *PubViolation that ended ctx, a context Watch returned:
// whether a request made with it failed because the server refused its
// subject, rather than for any other reason.
func Refusal(ctx context.Context) (*PubViolation, bool) {
	return errors.AsType[*PubViolation](context.Cause(ctx))
}

// refused ends the requests in flight to the subject err names (or to
// wildcards matching it), if err is a publish permissions violation.
func (w *PubWatch) refused(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	sm := pubViolationRe.FindStringSubmatch(err.Error())
	if sm == nil {
		return
	}
	subject, uerr := strconv.Unquote(sm[1])
	if uerr != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for watched, waiting := range w.waiting {
		if !server.SubjectMatchesFilter(subject, watched) {
			continue
		}
		for _, cancel := range waiting {
			cancel(&PubViolation{Subject: subject})
		}
	}
}

// APISubject is the subject of the JetStream API request op (for example
// "STREAM.PURGE.KV_flyball-tasks") as js sends it: under js's domain or
// API prefix, else under $JS.API.
func APISubject(js jetstream.JetStream, op string) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API." + op
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "." + op
	default:
		return jetstream.DefaultAPIPrefix + op
	}
}
