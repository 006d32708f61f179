package position

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// ErrBadPosition is wrapped by every error about position text that cannot
// be parsed. Test for it with errors.Is.
var ErrBadPosition = errors.New("position: unparseable position")

// maxEcho bounds how many bytes of an input, or of a part of it, an error
// message repeats; longer text is cut and its full length given instead.
const maxEcho = 80

// parseError is the error of the parsers: it names the kind of position,
// echoes the input (bounded) and says what is wrong with it.
type parseError struct {
	kind    string // "MariaDB GTID list", "MySQL GTID set"
	input   string
	problem string
}

func (e *parseError) Error() string {
	return "position: unparseable " + e.kind + " " + quote(e.input) + ": " + e.problem
}

// Unwrap makes errors.Is(err, ErrBadPosition) true.
func (e *parseError) Unwrap() error { return ErrBadPosition }

// quote returns s as a Go string literal, cut to maxEcho bytes (on a rune
// boundary) with its full length appended when it is longer.
func quote(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}
