package position

import (
	"errors"
	"strings"
	"testing"
)

func TestErrorEchoIsBounded(t *testing.T) {
	long := strings.Repeat("0-1-100,", 1000) + "x"
	longEntry := strings.Repeat("9", 500) + "-1-1"
	longSet := uuidA + ":" + strings.Repeat("1-2:", 1000) + "0"
	for _, parse := range []func(string) error{
		func(s string) error { _, err := ParseMariaDBGTIDList(s); return err },
		func(s string) error { _, err := ParseMySQLGTIDSet(s); return err },
	} {
		for _, in := range []string{long, longEntry, longSet, strings.Repeat("é", 200)} {
			err := parse(in)
			if !errors.Is(err, ErrBadPosition) {
				t.Fatalf("parsing %d bytes: %v", len(in), err)
			}
			msg := err.Error()
			if len(msg) > 400 {
				t.Errorf("message of %d bytes for an input of %d: %s", len(msg), len(in), msg)
			}
			if !strings.Contains(msg, "bytes)") {
				t.Errorf("message does not give the input's length: %s", msg)
			}
		}
	}
}

func TestQuote(t *testing.T) {
	if got := quote("0-1"); got != `"0-1"` {
		t.Errorf(`quote("0-1") = %s`, got)
	}
	exact := strings.Repeat("a", maxEcho)
	if got := quote(exact); got != `"`+exact+`"` {
		t.Errorf("quote of %d bytes cut: %s", maxEcho, got)
	}
	if got, want := quote(exact+"b"), `"`+exact+`"... (81 bytes)`; got != want {
		t.Errorf("quote = %s, want %s", got, want)
	}
	// Cut on a rune boundary: 'é' is two bytes, the 80th byte starts none.
	if got, want := quote("a"+strings.Repeat("é", 50)), `"a`+strings.Repeat("é", 39)+`"... (101 bytes)`; got != want {
		t.Errorf("quote = %s, want %s", got, want)
	}
}

func TestErrorsAreDistinctValues(t *testing.T) {
	_, err1 := ParseMariaDBGTIDList("0-1")
	_, err2 := ParseMySQLGTIDSet("x")
	if err1 == ErrBadPosition || err2 == ErrBadPosition || !errors.Is(err1, ErrBadPosition) || !errors.Is(err2, ErrBadPosition) {
		t.Errorf("errors %v, %v should wrap, not be, ErrBadPosition", err1, err2)
	}
	if got := ErrBadPosition.Error(); got != "position: unparseable position" {
		t.Errorf("ErrBadPosition = %q", got)
	}
}
