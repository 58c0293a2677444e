package main

import (
	"fmt"
	"io"
	"strconv"
)

// parseBefore parses a --before cursor; given is whether the flag was
// set. Not given, it is the newest page; given empty (a script's unset
// variable), it is refused like any cursor that is not one: it read as
// the newest page, and a loop over pages never ended.
func parseBefore(s string, given bool) (uint64, error) {
	if s == "" && !given {
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
