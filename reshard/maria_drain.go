package reshard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/freshread/freshread/internal/engines"
)

// mariaTrx is one InnoDB transaction as information_schema.INNODB_TRX
// shows it.
type mariaTrx struct {
	thread  int64  // trx_mysql_thread_id (0: an XA transaction without its connection)
	started string // trx_started, to the second
	id      uint64 // trx_id: a real one, or one made up from the transaction object's address
	state   string
	query   string
	// who is the connection as information_schema.PROCESSLIST shows it
	// (user, database, command), for messages.
	who string
}

// mariaFakeTrxID is the least of the IDs INNODB_TRX makes up for a
// transaction that has written nothing (trx_get_id_for_print: its
// address with bit 48 set); a real trx_id is below it and never changes.
const mariaFakeTrxID = 1 << 48

func (t mariaTrx) String() string {
	q := t.query
	if len(q) > 80 {
		q = q[:80] + "..."
	}
	return fmt.Sprintf("thread %d (%s; %s since %s: %q)", t.thread, t.who, strings.ToLower(t.state), t.started, q)
}

// ended reports whether t, listed at the fence, has ended by now: its
// connection has no transaction, or one that began at another second, or
// one with another real trx_id. The same second and no real ID (a new
// transaction of the same connection, or the same one, which may still
// get its real ID) is open: the drain waits for it, which costs at most
// the rest of that second.
func (t mariaTrx) ended(now []mariaTrx) bool {
	for _, c := range now {
		if c.thread != t.thread || (t.thread == 0 && c.id != t.id) {
			continue
		}
		if c.started != t.started {
			continue
		}
		if t.id < mariaFakeTrxID && c.id != t.id {
			continue
		}
		return false
	}
	return true
}

// mariaTrxCacheIdle is how long INNODB_TRX must go unread before a read
// refreshes it: InnoDB fills INNODB_TRX (and INNODB_LOCKS,
// INNODB_LOCK_WAITS) from a cache that it updates only when no session
// read it in the last 100 ms (trx_i_s_cache), so reading it more often
// shows the same, older, transactions.
const mariaTrxCacheIdle = 120 * time.Millisecond

// mariaOpenTrx lists the server's InnoDB transactions as INNODB_TRX's
// cache holds them.
func mariaOpenTrx(ctx context.Context, q querier) ([]mariaTrx, error) {
	rows, err := q.QueryContext(ctx, `SELECT t.trx_mysql_thread_id, CAST(t.trx_started AS CHAR), CAST(t.trx_id AS CHAR), t.trx_state, COALESCE(t.trx_query, ''),
  COALESCE(CONCAT_WS(', ', p.USER, p.DB, p.COMMAND), 'no connection')
 FROM information_schema.INNODB_TRX t LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id`)
	if err != nil {
		if n, ok := engines.MySQLErrorNumber(err); ok && (n == 1227 || n == 1044 || n == 1142) {
			return nil, fmt.Errorf("%w: the mover's user needs the PROCESS privilege, to see every transaction the switch waits for (information_schema.INNODB_TRX): %v", ErrConfig, err)
		}
		return nil, err
	}
	defer rows.Close()
	var out []mariaTrx
	for rows.Next() {
		var t mariaTrx
		var id string
		if err := rows.Scan(&t.thread, &t.started, &id, &t.state, &t.query, &t.who); err != nil {
			return nil, err
		}
		if t.id, err = strconv.ParseUint(id, 10, 64); err != nil {
			return nil, fmt.Errorf("trx_id %q: %w", id, err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// drain waits until every transaction open on the source's server when
// it is called (after the fence committed) has ended. As on PostgreSQL
// the guard alone is not enough: the trigger's lookup of the fence is a
// consistent read, so a transaction whose read view predates the fence
// (a REPEATABLE READ transaction that read before it, a statement that
// began before it) does not see it, and its write may commit after the
// fence. Every transaction with a read view is in
// information_schema.INNODB_TRX (prepared XA transactions too); one that
// began later sees the fence.
//
// INNODB_TRX is a cache (mariaTrxCacheIdle): to know that a read shows
// the transactions as they were after the fence, the drain first opens a
// transaction of its own (a consistent snapshot: the marker) and reads
// until the marker is listed, waiting mariaTrxCacheIdle between reads;
// then it reads every mariaTrxCacheIdle (or Config.PollInterval, if
// longer) until every transaction of that first list has ended. A
// session that reads INNODB_TRX more often than every 100 ms keeps the
// cache from being updated and the drain waits until SwitchTimeout (it
// never reads a list older than the marker). So a drain that finds
// transactions open lasts at least mariaTrxCacheIdle.
//
// INNODB_TRX does not say which database a transaction writes (or
// reads), so the drain waits for every transaction on the server; its
// trx_started has whole seconds, so a transaction is told from the next
// one of its connection by its start and, once it has written, its
// trx_id (see mariaTrx.ended). The mover's user needs the PROCESS
// privilege (ErrConfig without it: the drain would see only its own
// transactions).
func (mariaEngine) drain(ctx context.Context, cfg Config, src Shard, _ time.Time) error {
	fail := func(err error) error {
		return fmt.Errorf("reshard: wait for the transactions open on %s: %w", src.Name, err)
	}
	conn, err := src.DB.Conn(ctx)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	var self int64
	if err := conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&self); err != nil {
		return fail(err)
	}
	if _, err := conn.ExecContext(ctx, `START TRANSACTION WITH CONSISTENT SNAPSHOT`); err != nil {
		return fail(err)
	}
	marker := true
	defer func() {
		if !marker {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mariaRestoreTimeout)
		defer cancel()
		if _, err := conn.ExecContext(rctx, `ROLLBACK`); err != nil {
			discardConn(conn)
		}
	}()
	interval := max(cfg.PollInterval, mariaTrxCacheIdle)
	// list reads the cache: the others' transactions, and whether the
	// marker is among them.
	list := func() (others []mariaTrx, fresh bool, err error) {
		all, err := mariaOpenTrx(ctx, conn)
		for _, t := range all {
			if t.thread == self {
				fresh = true
			} else {
				others = append(others, t)
			}
		}
		return others, fresh, err
	}
	wait := func(what func() error) error {
		select {
		case <-ctx.Done():
			return what()
		case <-time.After(interval):
			return nil
		}
	}
	var open []mariaTrx
	for {
		others, fresh, err := list()
		if err != nil {
			return fail(err)
		}
		if fresh {
			open = others
			break
		}
		if err := wait(func() error {
			return fail(fmt.Errorf("information_schema.INNODB_TRX was not updated (InnoDB updates it only once no session has read it for 100 ms): %w", ctx.Err()))
		}); err != nil {
			return err
		}
	}
	// Every later read is of the same cache or a newer one.
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		return fail(err)
	}
	marker = false
	for len(open) > 0 {
		if err := wait(func() error {
			who := make([]string, len(open))
			for i, t := range open {
				who[i] = t.String()
			}
			return fmt.Errorf("reshard: %d transactions open on %s since the fence: %s: %w", len(open), src.Name, strings.Join(who, ", "), ctx.Err())
		}); err != nil {
			return err
		}
		others, _, err := list()
		if err != nil {
			return fail(err)
		}
		still := open[:0]
		for _, t := range open {
			if !t.ended(others) {
				still = append(still, t)
			}
		}
		open = still
	}
	return nil
}
