package main

import (
	"fmt"
	"io"
	"strconv"
)

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
