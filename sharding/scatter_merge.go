package sharding

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sync"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding/merge"
)

// mergeRead runs a multi-shard read on the shards of tg.mask through the
// merge (package merge), p as merge.New planned it (nil: a
// concatenation, for raw SQL).
func (s *Sharding) mergeRead(db *gorm.DB, tg *target, p *merge.Plan) (int64, error) {
	ms := &mergeShards{s: s, tg: tg, idx: make([]int, 0, bits.OnesCount64(tg.mask))}
	for m := tg.mask; m != 0; m &= m - 1 {
		ms.idx = append(ms.idx, bits.TrailingZeros64(m))
	}
	r := merge.Read{Op: tg.op.String(), Row: tg.op == opRow, DeepOffset: s.deepOffset(), RowsRead: mergeRowsRead}
	if tg.t != nil {
		r.Table = tg.t.Name
	}
	return merge.Run(db, ms, r, p)
}

// mergeShards are the shards of one merged read (merge.Shards): shard i
// of the merge is s.shards[idx[i]].
type mergeShards struct {
	s   *Sharding
	tg  *target
	idx []int
}

func (m *mergeShards) Len() int          { return len(m.idx) }
func (m *mergeShards) Name(i int) string { return m.s.shards[m.idx[i]].name }

// Exec runs the statement on shard i as on any shard of a scatter read
// (its part of a split IN list, the ownership predicate), after change.
func (m *mergeShards) Exec(i int, sub *gorm.DB, change func(i int, st *gorm.Statement)) {
	si := m.idx[i]
	sh := m.s.shards[si]
	m.s.onShard(sub, m.tg, sh)
	m.s.partMutator(m.tg, si, nil)(sub.Statement)
	change(i, sub.Statement)
	sh.db.Callback().Row().Execute(sub)
}

// deepOffset is the configured threshold of the method.
func (s *Sharding) deepOffset() int {
	switch {
	case s.cfg.DeepOffset < 0:
		return math.MaxInt
	case s.cfg.DeepOffset == 0:
		return 10000
	}
	return s.cfg.DeepOffset
}

// mergeRowsRead, when set (tests and benchmarks), is told how many rows
// the router read from each shard in each statement of a merge.
var mergeRowsRead func(shard string, rows int)

// textByteOrder reports how every shard's database compares text by
// default: PostgreSQL's default collation sorts in byte order when it is
// C, POSIX or C.UTF-8 of the libc provider, and is always deterministic;
// MariaDB and MySQL have no default the merge compares by (each column's
// collation is checked, merge_collation.go). Cached after the first
// answer.
func (s *Sharding) textByteOrder(ctx context.Context) merge.Collation {
	c := &s.coll
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return c.c
	}
	out := merge.Collation{Order: true, Equal: true}
	for _, sh := range s.shards {
		switch dialect(sh) {
		case "mysql":
			continue
		case "postgres":
		default:
			out = merge.Collation{Why: fmt.Sprintf("shard %q is not PostgreSQL, MariaDB or MySQL (its collation is unknown)", sh.name)}
		}
		if !out.Equal {
			break
		}
		sdb, err := sh.sqlDB()
		if err != nil {
			return merge.Collation{Why: err.Error()} // not cached: try again next time
		}
		var coll, provider string
		err = sdb.QueryRowContext(ctx, `SELECT datcollate, COALESCE(to_jsonb(d)->>'datlocprovider', 'c') FROM pg_database d WHERE datname = current_database()`).Scan(&coll, &provider)
		if err != nil {
			return merge.Collation{Why: fmt.Sprintf("shard %q: reading its collation: %v", sh.name, err)}
		}
		switch {
		case provider != "c":
			out.Order, out.Why = false, fmt.Sprintf("shard %q uses locale provider %q, not byte order (sort by a non-text column, or declare the column COLLATE \"C\")", sh.name, provider)
		case !byteOrderLocale(coll):
			out.Order, out.Why = false, fmt.Sprintf("shard %q collates text with %q, not in byte order (sort by a non-text column, or declare the column COLLATE \"C\")", sh.name, coll)
		}
		if !out.Order {
			break
		}
	}
	c.done, c.c = true, out
	return out
}

// collationCache remembers how the shards' databases compare text.
type collationCache struct {
	mu   sync.Mutex
	done bool
	c    merge.Collation
}
