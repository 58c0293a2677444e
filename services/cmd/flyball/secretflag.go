package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// secretAnnotation marks a flag whose value is a secret or may carry one
// (--api-token, --nats-url): an error about its value names the flag and
// never quotes the value. The annotation's value is a hint the error
// adds, saying how the value is read.
const secretAnnotation = "flyball/secret"

// markSecret marks the flag name of fs as secret-bearing, with hint, and
// refuses an empty value for it.
func markSecret(fs *pflag.FlagSet, name, hint string) {
	if err := fs.SetAnnotation(name, secretAnnotation, []string{hint}); err != nil {
		panic(err) // a flag registered just before: a programming error
	}
	markNonEmpty(fs, name)
}

// markNonEmpty refuses an empty value for the flag name of fs (a page
// cursor, a secret): given empty, by a script's unset variable, it read
// as not given (the newest page again, and a loop over pages never
// ended; no token at all).
func markNonEmpty(fs *pflag.FlagSet, name string) {
	f := fs.Lookup(name)
	f.Value = nonEmptyValue{f.Value}
	if f.DefValue == "[]" {
		// pflag knows "[]" for the zero default of its own list type
		// only: wrapped, --help would show "(default [])".
		f.DefValue = ""
	}
}

// errEmptyValue is a flag marked non-empty given an empty value.
var errEmptyValue = errors.New("empty")

// nonEmptyValue refuses an empty value (or, for a list, one with nothing
// but commas, spaces and quotes). For a secret flag, given empty (a
// script's unset variable, or "--api-token= <token>" with a space), it was
// dropped: --api-token= replaced FLYBALL_API_TOKENS with no token (dev
// generated one), and the value after the space became a stray argument
// that the error quoted. Each value is checked as it is set, so an empty
// one after a good one is refused too.
type nonEmptyValue struct{ pflag.Value }

func (v nonEmptyValue) Set(s string) error {
	if strings.Trim(s, " \t\r\n,\"") == "" {
		return errEmptyValue
	}
	return v.Value.Set(s)
}

// redactFlagError is the root's FlagErrorFunc, which every command inherits.
// pflag quotes the value it could not parse ("invalid argument
// \"<token>\" for \"--api-token\" flag: …"), and an argument it could not
// read as a flag whole, value included ("bad flag syntax:
// ---api-token=<token>", "unknown shorthand flag: 'a' in
// -api-token=<token>"): the secret went to stderr, and into docker logs
// on every restart of a crash loop. For a secret-bearing flag the error
// names the flag and says what is wrong; the text after an "=" of an
// argument that is not a flag is left out, since any value may be a
// secret there.
func redactFlagError(_ *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	if errors.As(err, &invalid) && invalid.GetFlag() != nil {
		f := invalid.GetFlag()
		if errors.Is(err, errEmptyValue) {
			return fmt.Errorf(`--%s: empty; give a value, or leave the flag out (a value after "--%s=" goes without a space)`, f.Name, f.Name)
		}
		if hint, ok := f.Annotations[secretAnnotation]; ok {
			return fmt.Errorf("--%s: %s; %s (the value is not shown)", f.Name, secretCause(invalid.Unwrap()), strings.Join(hint, " "))
		}
		return err
	}
	var syntax *pflag.InvalidSyntaxError
	if errors.As(err, &syntax) {
		return fmt.Errorf("bad flag syntax: %s", withoutValue(syntax.GetSpecifiedFlag()))
	}
	var unknown *pflag.NotExistError
	if errors.As(err, &unknown) && unknown.GetSpecifiedShortnames() != "" && unknown.GetSpecifiedName() != "" {
		return fmt.Errorf("unknown shorthand flag: %q in -%s", unknown.GetSpecifiedName()[0], withoutValue(unknown.GetSpecifiedShortnames()))
	}
	return err
}

// secretCause is what is wrong with a secret flag's value, without the
// value: encoding/csv's reason for a comma-separated one (not its line
// and column, which would place a quote within the secret).
func secretCause(err error) string {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return "not comma-separated values: " + pe.Err.Error()
	}
	return "its value does not parse"
}

// withoutValue cuts an argument after its first "=", replacing the value
// with [REDACTED].
func withoutValue(arg string) string {
	if i := strings.IndexByte(arg, '='); i >= 0 {
		return arg[:i+1] + "[REDACTED]"
	}
	return arg
}
