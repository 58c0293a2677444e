package main

import (
	"fmt"
	"io"
	"strconv"
)

// maxListLimit is the largest --limit of task list, runs and dlq list.
// A page is read into memory whole; one larger than this is no page (0
// lists every entry), and a limit near math.MaxInt overflowed in the
// listing.
const maxListLimit = 1_000_000

// checkLimit refuses a --limit out of [0, maxListLimit].
func checkLimit(limit int) error {
	if limit < 0 || limit > maxListLimit {
		return fmt.Errorf("--limit: must be in [0, %d] (0: all), got %d", maxListLimit, limit)
	}
	return nil
}

// parseBefore parses a --before cursor: empty, not given (the newest
// page; markNonEmpty refuses one given empty).
func parseBefore(s string) (uint64, error) {
	return parsePositive("before", "a stream sequence (a positive integer, as the last page's hint gave)", s)
}

// parsePositive parses the value s of flag --name, which wants a
// positive integer (want says which): 0 when s is empty, the flag not
// given (a flag given empty is refused by markNonEmpty).
func parsePositive(name, want, s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("--%s: want %s, got %q", name, want, s)
	}
	return n, nil
}

// printNextPage tells, on stderr, how to ask for the next page: one line,
// so that stdout stays the listing (or JSON) alone.
func printNextPage(w io.Writer, what, flag string, cursor any) {
	fmt.Fprintf(w, "more %s: repeat with %s %v for the next page\n", what, flag, cursor)
}
