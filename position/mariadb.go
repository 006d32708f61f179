package position

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MariaDBGTIDList is a MariaDB GTID position, as @@gtid_binlog_pos,
// @@gtid_slave_pos and @@last_gtid print it: a comma-separated list of
// domain-server-seq GTIDs, at most one per replication domain
// ("0-1-100,1-2-50"). The zero value is the empty list.
//
// Within a domain, transactions are ordered by their sequence number alone:
// with gtid_strict_mode (which this package assumes) a server never logs a
// sequence number lower than one already in its binlog for that domain,
// whichever server ID the GTID carries. So the server ID takes no part in
// HasApplied, and the list is ordered per domain only.
//
// A MariaDBGTIDList is immutable; its methods return new values.
type MariaDBGTIDList struct {
	gtids []mariadbGTID // sorted by domain, one per domain
}

type mariadbGTID struct {
	domain, server uint32
	seq            uint64
}

const mariadbKind = "MariaDB GTID list"

// ParseMariaDBGTIDList parses a MariaDB GTID list: GTIDs of three decimal
// numbers, domain-server-seq (domain and server ID 32 bits, sequence number
// 64 bits), separated by commas, in any order. White space around the GTIDs
// is ignored; the empty string (or only white space) is the empty list. A
// list naming one domain twice, or with an empty entry (a stray comma), is
// malformed. Errors wrap ErrBadPosition.
func ParseMariaDBGTIDList(s string) (MariaDBGTIDList, error) {
	body := trimSpace(s)
	if body == "" {
		return MariaDBGTIDList{}, nil
	}
	gtids := make([]mariadbGTID, 0, strings.Count(body, ",")+1)
	for entry := range strings.SplitSeq(body, ",") {
		entry = trimSpace(entry)
		if entry == "" {
			return MariaDBGTIDList{}, &parseError{mariadbKind, s, "empty entry (stray comma)"}
		}
		g, problem := parseMariaDBGTID(entry)
		if problem != "" {
			return MariaDBGTIDList{}, &parseError{mariadbKind, s, problem}
		}
		gtids = append(gtids, g)
	}
	slices.SortFunc(gtids, func(a, b mariadbGTID) int { return cmp.Compare(a.domain, b.domain) })
	for i := 1; i < len(gtids); i++ {
		if gtids[i].domain == gtids[i-1].domain {
			return MariaDBGTIDList{}, &parseError{mariadbKind, s,
				"domain " + strconv.FormatUint(uint64(gtids[i].domain), 10) + " appears twice"}
		}
	}
	return MariaDBGTIDList{gtids: gtids}, nil
}

// parseMariaDBGTID parses one domain-server-seq entry, returning a problem
// description instead of an error.
func parseMariaDBGTID(entry string) (mariadbGTID, string) {
	parts := strings.Split(entry, "-")
	if len(parts) != 3 {
		return mariadbGTID{}, "entry " + quote(entry) + " needs domain-server-seq"
	}
	names := [3]string{"domain", "server ID", "sequence number"}
	maxes := [3]uint64{math.MaxUint32, math.MaxUint32, math.MaxUint64}
	var v [3]uint64
	for i, p := range parts {
		n, problem := parseDecimal(p, names[i], maxes[i])
		if problem != "" {
			return mariadbGTID{}, "entry " + quote(entry) + ": " + problem
		}
		v[i] = n
	}
	return mariadbGTID{domain: uint32(v[0]), server: uint32(v[1]), seq: v[2]}, ""
}

// String returns the canonical text form: the GTIDs sorted by domain,
// separated by commas without spaces, numbers without leading zeros; the
// empty string for the empty list. ParseMariaDBGTIDList accepts it, and so
// does MariaDB (MASTER_GTID_WAIT, gtid_slave_pos).
func (l MariaDBGTIDList) String() string {
	b := make([]byte, 0, 24*len(l.gtids))
	for i, g := range l.gtids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(g.domain), 10)
		b = append(b, '-')
		b = strconv.AppendUint(b, uint64(g.server), 10)
		b = append(b, '-')
		b = strconv.AppendUint(b, g.seq, 10)
	}
	return string(b)
}

// Empty reports whether the list has no GTID.
func (l MariaDBGTIDList) Empty() bool { return len(l.gtids) == 0 }

// Equal reports whether l and o hold the same GTIDs, server IDs included.
func (l MariaDBGTIDList) Equal(o MariaDBGTIDList) bool { return slices.Equal(l.gtids, o.gtids) }

// Seq returns the sequence number of the list's GTID in domain, and whether
// the list has one.
func (l MariaDBGTIDList) Seq(domain uint32) (uint64, bool) {
	i, ok := l.find(domain)
	if !ok {
		return 0, false
	}
	return l.gtids[i].seq, true
}

func (l MariaDBGTIDList) find(domain uint32) (int, bool) {
	return slices.BinarySearchFunc(l.gtids, domain, func(g mariadbGTID, d uint32) int {
		return cmp.Compare(g.domain, d)
	})
}

// HasApplied reports whether a server at position l has applied the
// transactions up to position w: for every domain of w, l has a GTID in that
// domain with a sequence number at least w's. Server IDs are ignored (see
// the type's documentation). A domain missing from l counts as not applied,
// whatever w's sequence number there. Every list has applied the empty list.
func (l MariaDBGTIDList) HasApplied(w MariaDBGTIDList) bool {
	i := 0
	for _, g := range w.gtids {
		for i < len(l.gtids) && l.gtids[i].domain < g.domain {
			i++
		}
		if i == len(l.gtids) || l.gtids[i].domain != g.domain || l.gtids[i].seq < g.seq {
			return false
		}
	}
	return true
}

// Merge returns the per-domain maximum of l and o: every domain of either,
// with the GTID of the higher sequence number. It is the least position that
// has applied both, for a store's compare-and-raise. When both hold the same
// sequence number in a domain with different server IDs (possible only
// outside strict mode), the higher server ID is kept, so that Merge is
// commutative.
func (l MariaDBGTIDList) Merge(o MariaDBGTIDList) MariaDBGTIDList {
	out := make([]mariadbGTID, 0, max(len(l.gtids), len(o.gtids)))
	i, j := 0, 0
	for i < len(l.gtids) && j < len(o.gtids) {
		a, b := l.gtids[i], o.gtids[j]
		switch {
		case a.domain < b.domain:
			out = append(out, a)
			i++
		case a.domain > b.domain:
			out = append(out, b)
			j++
		default:
			if b.seq > a.seq || (b.seq == a.seq && b.server > a.server) {
				a = b
			}
			out = append(out, a)
			i++
			j++
		}
	}
	out = append(out, l.gtids[i:]...)
	out = append(out, o.gtids[j:]...)
	if len(out) == 0 {
		return MariaDBGTIDList{}
	}
	return MariaDBGTIDList{gtids: out}
}

// Domains returns the list's domains, in ascending order.
func (l MariaDBGTIDList) Domains() []uint32 {
	out := make([]uint32, len(l.gtids))
	for i, g := range l.gtids {
		out[i] = g.domain
	}
	return out
}
