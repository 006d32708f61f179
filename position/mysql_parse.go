package position

import (
	"encoding/hex"
	"math"
	"slices"
	"strings"
)

const mysqlKind = "MySQL GTID set"

// maxGNO is the greatest GTID number MySQL accepts: it keeps them in a
// signed 64-bit integer.
const maxGNO = math.MaxInt64

// maxTagLen is the longest tag MySQL accepts.
const maxTagLen = 32

// ParseMySQLGTIDSet parses a MySQL GTID set: entries separated by commas,
// with any white space around them (MySQL prints ",\n" between sources).
// An entry is a UUID (8-4-4-4-12 hexadecimal digits, any case) followed by
// colon-separated ranges ("1-100", or "7" for one transaction) and tags; a
// tag (a letter or underscore, then letters, digits and underscores, at
// most 32, any case) applies to the ranges after it up to the next tag, and
// must have at least one. Numbers start at 1 and are at most 2^63-1. Ranges
// may be given in any order, overlapping, and a source more than once; the
// result is normalized. The empty string (or only white space) is the empty
// set. An entry without ranges, an empty entry (a stray comma) or an empty
// part ("::", a trailing colon) is malformed. Errors wrap ErrBadPosition.
func ParseMySQLGTIDSet(s string) (MySQLGTIDSet, error) {
	body := trimSpace(s)
	if body == "" {
		return MySQLGTIDSet{}, nil
	}
	var ranges []keyedInterval
	for entry := range strings.SplitSeq(body, ",") {
		entry = trimSpace(entry)
		if entry == "" {
			return MySQLGTIDSet{}, &parseError{mysqlKind, s, "empty entry (stray comma)"}
		}
		var problem string
		ranges, problem = appendEntry(ranges, entry)
		if problem != "" {
			return MySQLGTIDSet{}, &parseError{mysqlKind, s, problem}
		}
	}
	return buildSet(ranges), nil
}

// keyedInterval is one range of the text, with the source it belongs to.
type keyedInterval struct {
	key tsid
	iv  interval
}

// appendEntry parses one entry, uuid(:tag|:range)+, and appends its ranges.
func appendEntry(ranges []keyedInterval, entry string) ([]keyedInterval, string) {
	parts := strings.Split(entry, ":")
	u, ok := parseUUID(parts[0])
	if !ok {
		return nil, "entry " + quote(entry) + ": " + quote(parts[0]) +
			" is not a UUID (8-4-4-4-12 hexadecimal digits)"
	}
	if len(parts) == 1 {
		return nil, "entry " + quote(entry) + " needs uuid:range"
	}
	key := tsid{uuid: u}
	tagHasRange := true
	for _, p := range parts[1:] {
		switch {
		case p == "":
			return nil, "entry " + quote(entry) + " has an empty part (\"::\" or a trailing colon)"
		case '0' <= p[0] && p[0] <= '9':
			iv, problem := parseInterval(p)
			if problem != "" {
				return nil, "entry " + quote(entry) + ": " + problem
			}
			ranges = append(ranges, keyedInterval{key, iv})
			tagHasRange = true
		default:
			if !validTag(p) {
				return nil, "entry " + quote(entry) + ": " + quote(p) + " is neither a range nor a tag" +
					" (a letter or underscore, then letters, digits, underscores; at most 32)"
			}
			if !tagHasRange {
				return nil, "entry " + quote(entry) + ": tag " + quote(key.tag) + " has no range"
			}
			key.tag = strings.ToLower(p)
			tagHasRange = false
		}
	}
	if !tagHasRange {
		return nil, "entry " + quote(entry) + ": tag " + quote(key.tag) + " has no range"
	}
	return ranges, ""
}

// parseInterval parses "first-last" or "n".
func parseInterval(p string) (interval, string) {
	firstText, lastText, isRange := strings.Cut(p, "-")
	first, problem := parseDecimal(firstText, "range start", maxGNO)
	if problem != "" {
		return interval{}, problem
	}
	last := first
	if isRange {
		if last, problem = parseDecimal(lastText, "range end", maxGNO); problem != "" {
			return interval{}, problem
		}
	}
	switch {
	case first == 0:
		return interval{}, "range " + quote(p) + " starts at 0 (GTID numbers start at 1)"
	case last < first:
		return interval{}, "range " + quote(p) + " ends before it starts"
	}
	return interval{first, last}, ""
}

// parseUUID parses the 36-character text form of a UUID, any case.
func parseUUID(s string) ([16]byte, bool) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	groups := [5][2]int{{0, 8}, {9, 13}, {14, 18}, {19, 23}, {24, 36}}
	at := 0
	for _, g := range groups {
		n, err := hex.Decode(u[at:], []byte(s[g[0]:g[1]]))
		if err != nil {
			return u, false
		}
		at += n
	}
	return u, true
}

// validTag reports whether t is a tag as MySQL accepts one.
func validTag(t string) bool {
	if len(t) == 0 || len(t) > maxTagLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// buildSet sorts and merges the ranges of the text into a normalized set.
func buildSet(ranges []keyedInterval) MySQLGTIDSet {
	slices.SortFunc(ranges, func(a, b keyedInterval) int {
		if c := compareTSID(a.key, b.key); c != 0 {
			return c
		}
		return compareIntervals(a.iv, b.iv)
	})
	var sets []tsidSet
	for _, r := range ranges {
		if n := len(sets); n > 0 && sets[n-1].key == r.key {
			sets[n-1].ivs = appendCoalesced(sets[n-1].ivs, r.iv)
			continue
		}
		sets = append(sets, tsidSet{key: r.key, ivs: intervals{r.iv}})
	}
	return MySQLGTIDSet{sets: sets}
}
