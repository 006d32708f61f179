package position

// SourceNumber is a transaction number of one GTID source. Source is the
// server UUID in lower case, followed by ":tag" for tagged GTIDs
// ("3e11fa47-71ca-11e1-9e33-c80aa9429562:batch").
type SourceNumber struct {
	// Source is the server UUID (and ":tag"), lower case.
	Source string
	// Number is the transaction number within Source.
	Number uint64
}

// source returns the name of ts's source.
func (ts tsidSet) source() string {
	b := appendUUID(make([]byte, 0, 37+len(ts.key.tag)), ts.key.uuid)
	if ts.key.tag != "" {
		b = append(b, ':')
		b = append(b, ts.key.tag...)
	}
	return string(b)
}

// Lasts returns, for each source of s in canonical order, its highest
// transaction number. On a primary, after a commit returned, the number of
// the commit's source is at or past the commit's number.
func (s MySQLGTIDSet) Lasts() []SourceNumber {
	out := make([]SourceNumber, 0, len(s.sets))
	for _, ts := range s.sets {
		out = append(out, SourceNumber{Source: ts.source(), Number: ts.ivs[len(ts.ivs)-1].last})
	}
	return out
}

// Prefixes returns, for each source of s in canonical order, the largest n
// such that source:1-n is contained in s; sources without transaction 1
// are left out. A replica whose prefix of a source is at least a write's
// number has applied that write, whatever the gaps after it.
func (s MySQLGTIDSet) Prefixes() []SourceNumber {
	out := make([]SourceNumber, 0, len(s.sets))
	for _, ts := range s.sets {
		if ts.ivs[0].first == 1 {
			out = append(out, SourceNumber{Source: ts.source(), Number: ts.ivs[0].last})
		}
	}
	return out
}
