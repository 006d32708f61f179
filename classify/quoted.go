package classify

// The quoted-text scanners both lexers share.

// scanString scans a string body after the opening quote q and returns the
// index after the closing quote. A doubled quote stands for one quote; with
// backslash set, a backslash escapes the next byte (MySQL strings,
// PostgreSQL E” strings).
func scanString(s string, i int, q byte, backslash bool) (int, error) {
	n := len(s)
	for i < n {
		c := s[i]
		if backslash && c == '\\' {
			i += 2
			continue
		}
		if c == q {
			if i+1 < n && s[i+1] == q {
				i += 2
				continue
			}
			return i + 1, nil
		}
		i++
	}
	return n, errUnterminated
}

// scanQuotedIdent scans a quoted identifier body after the opening quote q
// ("x" in PostgreSQL, `x` in MySQL) and returns the index after the closing
// quote and the identifier with doubled quotes collapsed.
func scanQuotedIdent(s string, i int, q byte) (int, string, error) {
	n := len(s)
	start := i
	var b []byte
	for i < n {
		if s[i] == q {
			if i+1 < n && s[i+1] == q {
				if b == nil {
					b = append([]byte(nil), s[start:i]...)
				}
				b = append(b, q)
				i += 2
				continue
			}
			if b != nil {
				return i + 1, string(b), nil
			}
			return i + 1, s[start:i], nil
		}
		if b != nil {
			b = append(b, s[i])
		}
		i++
	}
	return n, "", errUnterminated
}
