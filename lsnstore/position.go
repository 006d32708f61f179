package lsnstore

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Position is a replication position of any engine: what the store keeps
// per table and per replica, and what the routing rule compares. It is a
// vector of lanes, each a counter that only grows within its lane: the main
// lane, and any number of named lanes.
//
//   - PostgreSQL: the WAL LSN, in the main lane only.
//   - Heartbeat counter: the counter, in the main lane only.
//   - MariaDB: the sequence number of GTID domain 0 in the main lane and
//     that of domain d in the lane named d ("1", "2", …).
//   - MySQL: the transaction number of each GTID source in a lane named by
//     its server UUID, or "uuid:tag" for tagged GTIDs.
//
// A replica at position r has applied a write at position w when r covers
// w: every lane of r is at least w's (a missing lane is 0). Positions with
// several lanes are only partially ordered, so the store raises a position
// with Merge (the per-lane maximum), never by comparing the whole.
//
// The zero value is the empty position, "none": no write, or no replay
// position known. Positions are immutable values; a Position with only a
// main lane holds no pointer and costs no allocation.
type Position struct {
	main  LSN
	lanes []Lane // sorted by Name; no zero Value, no duplicate Name; never modified
}

// Lane is one named lane of a Position.
type Lane struct {
	// Name: ASCII letters, digits, '-', ':' and '_'; 1 to MaxLaneName
	// bytes.
	Name string
	// Value is how far the lane has got.
	Value LSN
}

// MaxLaneName is the longest lane name: a MySQL server UUID (36 bytes), a
// colon and a 32-byte tag, with room to spare.
const MaxLaneName = 96

// PositionOf returns the position whose main lane is l and which has no
// named lane.
func PositionOf(l LSN) Position { return Position{main: l} }

// NewPosition returns the position with main lane main and the given named
// lanes, in any order. Lanes with value 0 are dropped; a name given twice
// keeps the larger value. A malformed name is an error wrapping
// ErrBadPosition.
func NewPosition(main LSN, lanes ...Lane) (Position, error) {
	p := Position{main: main}
	if len(lanes) == 0 {
		return p, nil
	}
	ls := make([]Lane, 0, len(lanes))
	for _, l := range lanes {
		if !validLaneName(l.Name) {
			return Position{}, fmt.Errorf("%w: bad lane name %q", ErrBadPosition, truncate(l.Name))
		}
		if l.Value != 0 {
			ls = append(ls, l)
		}
	}
	p.lanes = normalizeLanes(ls)
	return p, nil
}

// normalizeLanes sorts ls by name and keeps the maximum of duplicates, in
// place. It returns nil for no lanes.
func normalizeLanes(ls []Lane) []Lane {
	if len(ls) == 0 {
		return nil
	}
	slices.SortFunc(ls, func(a, b Lane) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), -cmp.Compare(a.Value, b.Value))
	})
	return slices.CompactFunc(ls, func(a, b Lane) bool { return a.Name == b.Name })
}

func validLaneName(s string) bool {
	if s == "" || len(s) > MaxLaneName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == ':' || c == '_':
		default:
			return false
		}
	}
	return true
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// Main returns the main lane.
func (p Position) Main() LSN { return p.main }

// Lanes returns the named lanes, sorted by name, in a new slice.
func (p Position) Lanes() []Lane { return slices.Clone(p.lanes) }

// Lane returns the value of the named lane, 0 when p has none.
func (p Position) Lane(name string) LSN {
	if i, ok := p.findLane(name); ok {
		return p.lanes[i].Value
	}
	return 0
}

func (p Position) findLane(name string) (int, bool) {
	return slices.BinarySearchFunc(p.lanes, name, func(l Lane, n string) int { return strings.Compare(l.Name, n) })
}

// IsZero reports whether p is the empty position.
func (p Position) IsZero() bool { return p.main == 0 && len(p.lanes) == 0 }

// HasLanes reports whether p has a named lane.
func (p Position) HasLanes() bool { return len(p.lanes) > 0 }

// Equal reports whether p and q are the same position.
func (p Position) Equal(q Position) bool { return p.main == q.main && slices.Equal(p.lanes, q.lanes) }

// Covers reports whether p is at least q in every lane: a replica at p has
// applied a write at q. Every position covers the empty one.
func (p Position) Covers(q Position) bool {
	if p.main < q.main {
		return false
	}
	if len(q.lanes) == 0 {
		return true
	}
	i := 0
	for _, ql := range q.lanes {
		for i < len(p.lanes) && p.lanes[i].Name < ql.Name {
			i++
		}
		if i == len(p.lanes) || p.lanes[i].Name != ql.Name || p.lanes[i].Value < ql.Value {
			return false
		}
	}
	return true
}

// Merge returns the per-lane maximum of p and q: the least position that
// covers both. It allocates only when neither covers the other's named
// lanes.
func (p Position) Merge(q Position) Position {
	out := Position{main: max(p.main, q.main)}
	switch {
	case len(q.lanes) == 0:
		out.lanes = p.lanes
	case len(p.lanes) == 0:
		out.lanes = q.lanes
	case coversLanes(p.lanes, q.lanes):
		out.lanes = p.lanes
	case coversLanes(q.lanes, p.lanes):
		out.lanes = q.lanes
	default:
		out.lanes = mergeLanes(p.lanes, q.lanes, maxLSN, true)
	}
	return out
}

// Min returns the per-lane minimum of p and q: the greatest position both
// cover (a lane missing from either is 0).
func (p Position) Min(q Position) Position {
	out := Position{main: min(p.main, q.main)}
	if len(p.lanes) > 0 && len(q.lanes) > 0 {
		out.lanes = mergeLanes(p.lanes, q.lanes, minLSN, false)
	}
	return out
}

func maxLSN(a, b LSN) LSN { return max(a, b) }
func minLSN(a, b LSN) LSN { return min(a, b) }

func coversLanes(a, b []Lane) bool {
	return Position{lanes: a}.Covers(Position{lanes: b})
}

// mergeLanes combines two sorted lane lists with f; keepOne says whether a
// lane present in only one list is kept (maximum) or dropped (minimum).
func mergeLanes(a, b []Lane, f func(x, y LSN) LSN, keepOne bool) []Lane {
	out := make([]Lane, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].Name < b[j].Name):
			if keepOne {
				out = append(out, a[i])
			}
			i++
		case i == len(a) || b[j].Name < a[i].Name:
			if keepOne {
				out = append(out, b[j])
			}
			j++
		default:
			if v := f(a[i].Value, b[j].Value); v != 0 {
				out = append(out, Lane{Name: a[i].Name, Value: v})
			}
			i++
			j++
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Lag returns how far p is behind q, summed over the lanes where it is
// behind (saturating at the largest uint64): 0 when p covers q. For
// choosing the least lagging replica; it is not a byte count for positions
// with named lanes.
func (p Position) Lag(q Position) uint64 {
	var total uint64
	add := func(behind, ahead LSN) {
		if ahead > behind {
			d := uint64(ahead - behind)
			if total+d < total {
				total = ^uint64(0)
			} else {
				total += d
			}
		}
	}
	add(p.main, q.main)
	for _, ql := range q.lanes {
		add(p.Lane(ql.Name), ql.Value)
	}
	return total
}

// String returns the canonical text form, which the store keeps: the main
// lane as a pg_lsn ("16/B374D848"), then "+name=value" for each named lane
// in name order, each value in the same form ("0/64+1=0/20": 100 in the
// main lane, 32 in lane "1"). A position without named lanes prints as its
// LSN. The text is cookie-safe (it travels in session tokens).
func (p Position) String() string {
	if len(p.lanes) == 0 {
		return p.main.String()
	}
	return string(p.appendText(make([]byte, 0, 17+len(p.lanes)*(24+len(p.lanes[0].Name)))))
}

func (p Position) appendText(b []byte) []byte {
	b = p.main.appendText(b)
	for _, l := range p.lanes {
		b = append(b, '+')
		b = append(b, l.Name...)
		b = append(b, '=')
		b = l.Value.appendText(b)
	}
	return b
}

// ParsePosition parses the text form of String. Named lanes may come in any
// order (the store's script may sort them differently); a name given twice
// is an error. An LSN's text is a position with a main lane only. Errors
// wrap ErrBadPosition.
func ParsePosition(s string) (Position, error) {
	p, ok := parsePosition(s)
	if !ok {
		return Position{}, fmt.Errorf("%w %q", ErrBadPosition, truncate(s))
	}
	return p, nil
}

// parsePosition is ParsePosition without the error value; it allocates
// only for named lanes.
func parsePosition(s string) (Position, bool) {
	head, rest, hasLanes := strings.Cut(s, "+")
	main, ok := parseLSN(head)
	if !ok {
		return Position{}, false
	}
	if !hasLanes {
		return Position{main: main}, true
	}
	ls := make([]Lane, 0, strings.Count(rest, "+")+1)
	for {
		var item string
		item, rest, hasLanes = strings.Cut(rest, "+")
		name, val, ok := strings.Cut(item, "=")
		if !ok || !validLaneName(name) {
			return Position{}, false
		}
		v, ok := parseLSN(val)
		if !ok {
			return Position{}, false
		}
		if v != 0 {
			ls = append(ls, Lane{Name: name, Value: v})
		}
		if !hasLanes {
			break
		}
	}
	n := len(ls)
	ls = normalizeLanes(ls)
	if len(ls) != n {
		return Position{}, false // a name given twice
	}
	return Position{main: main, lanes: ls}, true
}
