package lsnstore

import (
	"errors"
	"fmt"
)

// LSN is a PostgreSQL WAL position (pg_lsn), compared as a uint64: the high
// 32 bits are the part before the slash of its text form, the low 32 bits
// the part after it. The zero LSN means "none": no write, or no replay
// position known.
type LSN uint64

// ErrBadPosition is wrapped by every error about a position that cannot be
// parsed, whether given to ParseLSN or found in a store.
var ErrBadPosition = errors.New("lsnstore: unparseable position")

// ParseLSN parses the text form of a pg_lsn, two hexadecimal numbers of one
// to eight digits each separated by a slash ("16/B374D848"), upper or lower
// case, with no surrounding space. Errors wrap ErrBadPosition.
func ParseLSN(s string) (LSN, error) {
	l, ok := parseLSN(s)
	if !ok {
		return 0, fmt.Errorf("%w %q", ErrBadPosition, s)
	}
	return l, nil
}

// parseLSN is ParseLSN without the error value; it does not allocate.
func parseLSN(s string) (LSN, bool) {
	var hi, lo uint64
	i, n := 0, 0
	for ; i < len(s) && s[i] != '/'; i++ {
		d, ok := hexDigit(s[i])
		if !ok {
			return 0, false
		}
		hi = hi<<4 | d
		n++
	}
	if n == 0 || n > 8 || i == len(s) {
		return 0, false
	}
	i++ // the slash
	n = 0
	for ; i < len(s); i++ {
		d, ok := hexDigit(s[i])
		if !ok {
			return 0, false
		}
		lo = lo<<4 | d
		n++
	}
	if n == 0 || n > 8 {
		return 0, false
	}
	return LSN(hi<<32 | lo), true
}

func hexDigit(c byte) (uint64, bool) {
	switch {
	case '0' <= c && c <= '9':
		return uint64(c - '0'), true
	case 'A' <= c && c <= 'F':
		return uint64(c-'A') + 10, true
	case 'a' <= c && c <= 'f':
		return uint64(c-'a') + 10, true
	}
	return 0, false
}

// String returns the canonical text form, as PostgreSQL prints a pg_lsn:
// uppercase hexadecimal without padding ("16/B374D848", "0/0").
func (l LSN) String() string {
	var buf [17]byte
	return string(l.appendText(buf[:0]))
}

// appendText appends the canonical text form of l to b.
func (l LSN) appendText(b []byte) []byte {
	b = appendHex32(b, uint32(l>>32))
	b = append(b, '/')
	return appendHex32(b, uint32(l))
}

func appendHex32(b []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	shift := 28
	for shift > 0 && v>>shift == 0 {
		shift -= 4
	}
	for ; shift >= 0; shift -= 4 {
		b = append(b, digits[v>>shift&0xF])
	}
	return b
}
