package position

import "cmp"

// interval is the closed range of GTID numbers first..last, first >= 1.
type interval struct{ first, last uint64 }

// intervals is a normalized list of intervals: sorted, with neither overlap
// nor adjacency between neighbours (1-3:5 but never 1-3:4-5).
type intervals []interval

func compareIntervals(a, b interval) int {
	return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.last, b.last))
}

// appendCoalesced appends iv to the normalized list out, whose last interval
// starts at or before iv, merging the two when they touch. Numbers stay
// below math.MaxUint64, so last+1 cannot overflow.
func appendCoalesced(out intervals, iv interval) intervals {
	if n := len(out); n > 0 && iv.first <= out[n-1].last+1 {
		out[n-1].last = max(out[n-1].last, iv.last)
		return out
	}
	return append(out, iv)
}

// union returns the normalized union of two normalized lists, in a new slice.
func (a intervals) union(b intervals) intervals {
	out := make(intervals, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var next interval
		if j == len(b) || (i < len(a) && a[i].first <= b[j].first) {
			next = a[i]
			i++
		} else {
			next = b[j]
			j++
		}
		out = appendCoalesced(out, next)
	}
	return out
}

// contains reports whether every number of b is in a. Since a is normalized,
// each interval of b must lie within a single interval of a.
func (a intervals) contains(b intervals) bool {
	i := 0
	for _, iv := range b {
		for i < len(a) && a[i].last < iv.first {
			i++
		}
		if i == len(a) || a[i].first > iv.first || a[i].last < iv.last {
			return false
		}
	}
	return true
}
