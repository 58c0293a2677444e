package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/flyballhq/flyball/services/api"
)

// tokenFilePoll is how often a running API's --api-token-file is read
// for a change.
const tokenFilePoll = 10 * time.Second

// parseTokenFile reads a token file's content: one token per line, blank
// lines and lines starting with # skipped, each trimmed. A short token is
// an error naming path and the line, never the token.
func parseTokenFile(path string, b []byte) ([]string, error) {
	var toks []string
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		n++
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			if len(line) < api.MinTokenLength {
				return nil, fmt.Errorf("%s: line %d has %d characters, want at least %d", path, n, len(line), api.MinTokenLength)
			}
			toks = append(toks, line)
		}
	}
	return toks, nil
}

// tokenFile re-reads --api-token-file into a running API, so a token is
// added or removed without a restart. Tokens from --api-token or
// FLYBALL_API_TOKENS, or the one dev generates when neither they nor the
// file give one, stay fixed: the API accepts them and the file's, as at
// start. A reload replaces only the file's tokens.
type tokenFile struct {
	path  string
	fixed []string
	set   func([]string) error // api.Service.SetTokens
	log   *slog.Logger
	// seen is the content last read, or its read error: a poll acts once
	// per change, so a bad file is logged once, not every poll.
	seen string
	// current is the accepted set, sorted, without repeats.
	current []string
}

// newTokenFile watches path, read as content at start, for tokens
// fixed+fromFile.
func newTokenFile(path string, fixed, fromFile []string, content string) *tokenFile {
	tf := &tokenFile{path: path, fixed: slices.Clone(fixed), seen: content, log: slog.New(slog.DiscardHandler)}
	tf.current = sortedSet(append(slices.Clone(fixed), fromFile...))
	return tf
}

// sortedSet sorts toks and drops repeats, in place.
func sortedSet(toks []string) []string {
	slices.Sort(toks)
	return slices.Compact(toks)
}

// reload reads the file and gives the API its tokens and the fixed ones.
// Unless force (SIGHUP), content already read is not applied again. A
// file that cannot be read, holds no token or a short one is refused:
// the API keeps its tokens, and the error names the file and the line.
func (tf *tokenFile) reload(force bool) {
	b, err := os.ReadFile(tf.path)
	seen := string(b)
	if err != nil {
		seen = "\x00" + err.Error()
	}
	if seen == tf.seen && !force {
		return
	}
	tf.seen = seen
	var toks []string
	if err == nil {
		toks, err = parseTokenFile(tf.path, b)
	}
	if err == nil && len(toks) == 0 {
		err = fmt.Errorf("%s: no tokens in the file (refused: it would lock out every client that uses one)", tf.path)
	}
	if err == nil {
		toks = sortedSet(append(slices.Clone(tf.fixed), toks...))
		if err = tf.set(toks); err != nil {
			err = fmt.Errorf("%s: %w", tf.path, err)
		}
	}
	switch {
	case err != nil:
		tf.log.Error("api token file refused; the API keeps its current tokens until the file changes or SIGHUP", "err", err)
	case !slices.Equal(toks, tf.current):
		tf.current = toks
		tf.log.Info("api tokens reloaded", "file", tf.path, "tokens", len(toks))
	case force:
		tf.log.Info("api token file read again: tokens unchanged", "file", tf.path, "tokens", len(toks))
	}
}

// watch reloads on every value from hup and when the content changes,
// read every poll, until ctx ends. The content is compared, not the
// modification time: a mounted Kubernetes secret changes by a symlink
// swap, and an editor may keep the time.
func (tf *tokenFile) watch(ctx context.Context, poll time.Duration, hup <-chan os.Signal) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			tf.reload(true)
		case <-t.C:
			tf.reload(false)
		}
	}
}

// start gives the file's tokens to a, on SIGHUP and when the file
// changes (read every poll), until the returned stop, which waits for
// the watch to end. On a nil tokenFile (no --api-token-file) or a nil a
// (no API in this process) it does nothing, and SIGHUP keeps its
// default: the process stops.
func (tf *tokenFile) start(ctx context.Context, poll time.Duration, a *api.Service, log *slog.Logger) (stop func()) {
	if tf == nil || a == nil {
		return func() {}
	}
	tf.set, tf.log = a.SetTokens, log
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tf.watch(ctx, poll, hup)
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}
