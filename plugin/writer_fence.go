package plugin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/internal/lib/sqlerr"
	"github.com/freshread/freshread/internal/metrics"
	"github.com/freshread/freshread/lsnstore"
)

// The readers' side of writer tags (writer_tag.go; docs/design/
// reliability.md, "A COMMIT that outlives its lease"). After a
// discontinuity, before a process takes the primary's position as its
// floor, it ends every connection to the primary that holds a writer tag
// of this store whose lease member the store removed for having lapsed
// (lsnstore.LeaseTagger): a process cut off from the store, paused past
// its lease or gone; not a member lost with the store's data, whose
// process publishes its writes as ever. A COMMIT such a
// connection runs has then either committed, below the position read
// next, or never will; the writer's later writes are refused until it
// holds a lease again, on connections it tags anew. While such a
// connection is left, the process does not accept the store: its reads
// keep going to the primary.

// writerFence is the fence's state.
type writerFence struct {
	// denied: ending a connection was refused (logged once); failing: the
	// last fence failed (logged once per failing spell; poller only).
	denied  sync.Once
	failing bool
	// blind: the MariaDB fence cannot list other users' connections
	// (logged once).
	blind sync.Once
}

// endLapsedWritersQuery ends, and lists, the connections of this
// database, other than the asking one, that hold a tag of namespace $1
// (classid: the two-int4 form of pg_advisory_lock_shared) among $2.
// One statement on one connection: a connection of this process's pool
// that another process ended is never the one that ends the others.
const endLapsedWritersQuery = `SELECT l.pid, pg_terminate_backend(l.pid) FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::int8 = $1 AND l.objid::int8 = ANY($2::int8[])
  AND l.pid <> pg_backend_pid()`

// fenceLapsedWriters ends the primary connections of lapsed writers
// (above) and reports whether none was left: the caller may then read
// the primary's position and take it as its floor. Any failure reports
// false: the store is not accepted this poll.
func (p *Plugin) fenceLapsedWriters(ctx context.Context) bool {
	tg, ok := p.cfg.Store.(lsnstore.LeaseTagger)
	if !ok || p.engine == nil {
		return true
	}
	_, maria := p.engine.(*mariaEngine)
	if !maria && p.engine.dialect() != classify.Postgres {
		return true
	}
	var found int
	var err error
	if maria {
		found, err = p.endLapsedMariaWriters(ctx, tg)
	} else {
		found, err = p.endLapsedWriters(ctx, tg)
	}
	if err != nil {
		if sqlerr.PostgresCode(err) == "42501" {
			// insufficient_privilege
			p.fence.denied.Do(func() {
				p.cfg.Logger.ErrorContext(ctx, "freshread: cannot end the primary connections of a process whose lease in the position store lapsed; table reads stay on the primary until they end: grant this process's database role pg_signal_backend, or run every process of the store under one role", "err", redact(err, p.primarySecrets))
			})
		} else if errors.Is(err, errKillDenied) {
			p.fence.denied.Do(func() {
				p.cfg.Logger.ErrorContext(ctx, "freshread: cannot end the primary connections of a process whose lease in the position store lapsed; table reads stay on the primary until they end: GRANT CONNECTION ADMIN ON *.* (SUPER before MariaDB 10.5) to this process's user, or run every process of the store under one user", "err", redact(err, p.primarySecrets))
			})
		} else if !p.fence.failing {
			p.fence.failing = true
			p.cfg.Logger.WarnContext(ctx, "freshread: cannot end the primary connections of processes whose lease in the position store lapsed; table reads stay on the primary until it can: err says why", "err", redact(err, p.primarySecrets))
		}
		return false
	}
	p.fence.failing = false
	if found == 0 {
		return true
	}
	p.stats.lapsedConnsEnded.Add(uint64(found))
	p.cfg.Logger.WarnContext(ctx, "freshread: ended primary connections of a process whose lease in the position store lapsed (cut off from Redis, paused or gone), so that no write through them commits after the position this process now waits for", "connections", found)
	return false // the next poll checks that they are gone
}

// fenceWithOwnBudget is fenceLapsedWriters with a budget of its own (a
// poll's timeout), not what the poll's verification left of ctx: a
// statement that ended connections and then ran out of time would have
// them ended unseen, uncounted and unlogged, and the poll would wait one
// more round for nothing.
func (p *Plugin) fenceWithOwnBudget(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.pollTimeout())
	defer cancel()
	return p.fenceLapsedWriters(ctx)
}

// endLapsedWriters ends the primary connections holding a tag the store
// lists as lapsed, and returns how many it found: no query when none
// lapsed.
func (p *Plugin) endLapsedWriters(ctx context.Context, tg lsnstore.LeaseTagger) (int, error) {
	lapsed, err := tg.LapsedLeaseTags(ctx)
	if err != nil || len(lapsed) == 0 {
		return 0, err
	}
	ns, _ := tg.LeaseTag()
	var arr strings.Builder
	arr.WriteByte('{')
	for i, t := range lapsed {
		if i > 0 {
			arr.WriteByte(',')
		}
		arr.WriteString(strconv.FormatUint(uint64(t), 10))
	}
	arr.WriteByte('}')
	rows, err := p.primaryDB.QueryContext(ctx, endLapsedWritersQuery, int64(ns), arr.String())
	if err != nil {
		return 0, fmt.Errorf("plugin: end the connections of lapsed writers: %w", err)
	}
	defer rows.Close()
	found := 0
	for rows.Next() {
		found++
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("plugin: end the connections of lapsed writers: %w", err)
	}
	return found, nil
}

// descLapsedEnded is the fence's metric (metrics.go).
var descLapsedEnded = metrics.NewDesc("freshread_lapsed_writer_connections_ended_total", "Primary connections of processes whose lease in the position store lapsed, ended before this process took its floor.", nil)
