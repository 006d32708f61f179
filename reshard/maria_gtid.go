package reshard

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// gtidPos is a MariaDB GTID position ("0-1-57,1-2-9"): per replication
// domain, the last transaction (server id, sequence number). A binlog
// reader started at it reads every transaction after it; with
// gtid_strict_mode the sequence numbers of a domain grow in binlog order,
// so "every transaction up to p" is p's sequence number per domain.
type gtidPos map[uint32]gtid

type gtid struct {
	server uint32
	seq    uint64
}

// parseGTIDPos parses a position ("": none).
func parseGTIDPos(s string) (gtidPos, error) {
	p := gtidPos{}
	s = strings.TrimSpace(s)
	if s == "" {
		return p, nil
	}
	for _, part := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(part), "-")
		if len(f) != 3 {
			return nil, fmt.Errorf("reshard: bad GTID position %q", s)
		}
		d, err1 := strconv.ParseUint(f[0], 10, 32)
		sv, err2 := strconv.ParseUint(f[1], 10, 32)
		n, err3 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("reshard: bad GTID position %q", s)
		}
		if _, dup := p[uint32(d)]; dup {
			return nil, fmt.Errorf("reshard: bad GTID position %q: domain %d twice", s, d)
		}
		p[uint32(d)] = gtid{uint32(sv), n}
	}
	return p, nil
}

// String formats p by domain, as MariaDB does.
func (p gtidPos) String() string {
	ds := make([]uint32, 0, len(p))
	for d := range p {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%d-%d-%d", d, p[d].server, p[d].seq)
	}
	return strings.Join(parts, ",")
}

// covers reports whether every transaction up to o is also up to p.
func (p gtidPos) covers(o gtidPos) bool {
	for d, g := range o {
		h, ok := p[d]
		if !ok || h.seq < g.seq {
			return false
		}
	}
	return true
}

func (p gtidPos) clone() gtidPos {
	out := make(gtidPos, len(p))
	for d, g := range p {
		out[d] = g
	}
	return out
}

// binlogCoord is a place in the source's binlog: a file and the offset
// of the end of an event in it.
type binlogCoord struct {
	file string
	pos  uint64
}

func (c binlogCoord) String() string { return fmt.Sprintf("%s:%d", c.file, c.pos) }

// binlogIndex is the number of a binlog file ("mysql-bin.000012": 12).
func binlogIndex(file string) (uint64, error) {
	base := path.Base(file)
	i := strings.LastIndexByte(base, '.')
	if i < 0 {
		return 0, fmt.Errorf("reshard: binlog file name %q has no number", file)
	}
	n, err := strconv.ParseUint(base[i+1:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reshard: binlog file name %q has no number", file)
	}
	return n, nil
}

// before reports whether c is before o in the binlog.
func (c binlogCoord) before(o binlogCoord) (bool, error) {
	ci, err := binlogIndex(c.file)
	if err != nil {
		return false, err
	}
	oi, err := binlogIndex(o.file)
	if err != nil {
		return false, err
	}
	if ci != oi {
		return ci < oi, nil
	}
	return c.pos < o.pos, nil
}

// packed is c as one number (the file's index in the upper bits; a
// binlog file is at most 1 GiB), for roundResult.reached.
func (c binlogCoord) packed() uint64 {
	i, _ := binlogIndex(c.file)
	return i<<32 | c.pos&0xffffffff
}

// bytesAfter is how many binlog bytes o is past c (packed): exact in one
// file; from another file, o's offset in its own (a lower bound).
func bytesAfter(c uint64, o binlogCoord) int64 {
	oi, _ := binlogIndex(o.file)
	if oi == c>>32 {
		return int64(o.pos) - int64(c&0xffffffff)
	}
	return int64(o.pos)
}
