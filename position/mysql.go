package position

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"slices"
	"strconv"
)

// MySQLGTIDSet is a MySQL GTID set, as @@GLOBAL.gtid_executed prints it:
// for each source UUID, the ranges of transaction numbers executed
// ("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100:200-300"), and from MySQL
// 8.3 on also per tag ("3e11fa47-...:1-5:batch:1-3"). The transactions of a
// tagged and an untagged source, or of two tags, are unrelated: the key of
// a range is the pair (UUID, tag). The zero value is the empty set.
//
// GTID sets are compared by inclusion (Contains), not by order: a replica
// has applied a write when the write's set is a subset of its
// gtid_executed, as GTID_SUBSET and WAIT_FOR_EXECUTED_GTID_SET decide.
//
// A MySQLGTIDSet is immutable; its methods return new values.
type MySQLGTIDSet struct {
	sets []tsidSet // sorted by key, untagged first for a UUID; none empty
}

// tsid is MySQL's transaction source identifier: a UUID and a tag, the tag
// in lower case ("" for untagged GTIDs).
type tsid struct {
	uuid [16]byte
	tag  string
}

func compareTSID(a, b tsid) int {
	return cmp.Or(bytes.Compare(a.uuid[:], b.uuid[:]), cmp.Compare(a.tag, b.tag))
}

type tsidSet struct {
	key tsid
	ivs intervals // normalized, not empty
}

// String returns the canonical text form, as MySQL prints it but on one
// line: sources sorted by UUID (lower case), each UUID written once with its
// untagged ranges first and then each tag (sorted, lower case) with its
// ranges, ranges normalized ("1-5:7"), sources separated by a comma without
// space; the empty string for the empty set. ParseMySQLGTIDSet accepts it,
// and so does MySQL.
func (s MySQLGTIDSet) String() string {
	var b []byte
	for i, ts := range s.sets {
		if i == 0 || ts.key.uuid != s.sets[i-1].key.uuid {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendUUID(b, ts.key.uuid)
		}
		if ts.key.tag != "" {
			b = append(b, ':')
			b = append(b, ts.key.tag...)
		}
		for _, iv := range ts.ivs {
			b = append(b, ':')
			b = strconv.AppendUint(b, iv.first, 10)
			if iv.last != iv.first {
				b = append(b, '-')
				b = strconv.AppendUint(b, iv.last, 10)
			}
		}
	}
	return string(b)
}

func appendUUID(b []byte, u [16]byte) []byte {
	var buf [36]byte
	hex.Encode(buf[0:8], u[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], u[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], u[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], u[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], u[10:16])
	return append(b, buf[:]...)
}

// Empty reports whether the set holds no GTID.
func (s MySQLGTIDSet) Empty() bool { return len(s.sets) == 0 }

// Equal reports whether s and o hold the same GTIDs.
func (s MySQLGTIDSet) Equal(o MySQLGTIDSet) bool {
	return slices.EqualFunc(s.sets, o.sets, func(a, b tsidSet) bool {
		return a.key == b.key && slices.Equal(a.ivs, b.ivs)
	})
}

// Contains reports whether every GTID of o is in s: o ⊆ s, which is
// GTID_SUBSET(o, s). A replica whose gtid_executed is s has applied a write
// whose position is o. Every set contains the empty set.
func (s MySQLGTIDSet) Contains(o MySQLGTIDSet) bool {
	i := 0
	for _, ots := range o.sets {
		for i < len(s.sets) && compareTSID(s.sets[i].key, ots.key) < 0 {
			i++
		}
		if i == len(s.sets) || s.sets[i].key != ots.key || !s.sets[i].ivs.contains(ots.ivs) {
			return false
		}
	}
	return true
}

// Union returns the set of the GTIDs in s or in o: the least set that
// contains both, for a store's compare-and-raise.
func (s MySQLGTIDSet) Union(o MySQLGTIDSet) MySQLGTIDSet {
	out := make([]tsidSet, 0, max(len(s.sets), len(o.sets)))
	i, j := 0, 0
	for i < len(s.sets) && j < len(o.sets) {
		a, b := s.sets[i], o.sets[j]
		switch c := compareTSID(a.key, b.key); {
		case c < 0:
			out = append(out, a)
			i++
		case c > 0:
			out = append(out, b)
			j++
		default:
			out = append(out, tsidSet{key: a.key, ivs: a.ivs.union(b.ivs)})
			i++
			j++
		}
	}
	out = append(out, s.sets[i:]...)
	out = append(out, o.sets[j:]...)
	if len(out) == 0 {
		return MySQLGTIDSet{}
	}
	return MySQLGTIDSet{sets: out}
}
