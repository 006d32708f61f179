package position

import "strconv"

// isSpace reports whether c is ASCII white space, as MySQL prints between
// the entries of a GTID set (",\n").
func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

// trimSpace removes leading and trailing ASCII white space.
func trimSpace(s string) string {
	i, j := 0, len(s)
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	return s[i:j]
}

// parseDecimal parses s as an unsigned decimal number no greater than max:
// digits only, no sign, leading zeros allowed. The problem it returns, if
// any, is phrased about a number called name.
func parseDecimal(s, name string, max uint64) (uint64, string) {
	if s == "" {
		return 0, name + " is missing"
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, name + " " + quote(s) + " is not a decimal number"
		}
		d := uint64(c - '0')
		if v > max/10 || (v == max/10 && d > max%10) {
			return 0, name + " " + quote(s) + " exceeds " + strconv.FormatUint(max, 10)
		}
		v = v*10 + d
	}
	return v, ""
}
