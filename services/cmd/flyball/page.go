package main

import (
	"fmt"
	"io"
	"strconv"
)

// parseBefore parses a --before cursor: empty, not given (the newest
// page; markNonEmpty refuses one given empty).
func parseBefore(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("--before: want a stream sequence (a positive integer, as the last page's hint gave), got %q", s)
	}
	return seq, nil
}

// printNextPage tells, on stderr, how to ask for the next page: one line,
// so that stdout stays the listing (or JSON) alone.
func printNextPage(w io.Writer, what, flag string, cursor any) {
	fmt.Fprintf(w, "more %s: repeat with %s %v for the next page\n", what, flag, cursor)
}
