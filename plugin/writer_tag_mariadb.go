package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"weak"
)

// Writer tags on MariaDB (writer_tag.go). MariaDB has no shared advisory
// lock that another session can list, so a connection's tag is a user
// lock (GET_LOCK) whose name holds the namespace, the member's tag and
// the connection's own ID: "freshread:<ns>:<tag>:<connection id>". No two
// connections contend for one, and another process finds the holders of
// a lapsed tag by asking, for each connection of the server
// (information_schema.PROCESSLIST), whether it holds the lock of its own
// ID (IS_USED_LOCK), then ends them (KILL CONNECTION: writer_fence.go).
//
// A connection takes the tag before a write's fence, in a round trip
// (the write's transaction, before its COMMIT; an autocommit write,
// before the statement, on a connection pinned for it) and keeps it: a
// connection that holds it already takes nothing again, and taking the
// next member's tag releases the previous one's in the same statement.
// An idle connection holding a lapsed tag is ended too: its pool opens
// another.

// connValues remembers a value per driver connection (mconns: the tag it
// holds, so that a connection that holds the current member's tag takes
// nothing again, no round trip after a connection's first write under a
// member; mthreads: its server thread's ID). Forgotten when the driver
// connection is collected. A program that releases the connection's user
// locks itself (RELEASE_ALL_LOCKS) between a write and its commit removes
// its tag unseen, as pg_advisory_unlock_all does on PostgreSQL
// (docs/design/reliability.md).
type connValues[V comparable] struct {
	m sync.Map // weak.Pointer[byte] (the driver connection) -> V
}

// connKey is the key of conn's driver connection (zero: none known).
func connKey(conn *sql.Conn) weak.Pointer[byte] {
	var key weak.Pointer[byte]
	_ = conn.Raw(func(dc any) error {
		if v := reflect.ValueOf(dc); v.Kind() == reflect.Pointer && !v.IsNil() {
			key = weak.Make((*byte)(v.UnsafePointer()))
		}
		return nil
	})
	return key
}

// held is the value remembered for the connection key names (zero: none).
func (m *connValues[V]) held(key weak.Pointer[byte]) V {
	var zero V
	if key.Value() == nil {
		return zero
	}
	if v, ok := m.m.Load(key); ok {
		return v.(V)
	}
	return zero
}

func (m *connValues[V]) remember(key weak.Pointer[byte], v V) {
	ptr := key.Value()
	if ptr == nil {
		return
	}
	if _, loaded := m.m.Swap(key, v); !loaded {
		runtime.AddCleanup(ptr, func(k weak.Pointer[byte]) { m.m.Delete(k) }, key)
	}
}

// takeMariaTag takes the current tag on the driver connection key names
// (zero: unknown) through query (its connection, or a transaction on it),
// unless it holds it already, and returns it (0: none taken).
func (p *Plugin) takeMariaTag(ctx context.Context, key weak.Pointer[byte], query func(ctx context.Context, q string, args ...any) *sql.Row) (uint32, error) {
	q, tag := p.tagLock(false)
	if q == "" {
		return 0, nil
	}
	if p.tags.mconns.held(key) == tag {
		return tag, nil
	}
	if err := mariaTake(query(ctx, q)); err != nil {
		return 0, err
	}
	p.tags.mconns.remember(key, tag)
	return tag, nil
}

// mariaTagName is the SQL expression of the tag lock's name on the
// connection that runs it.
func mariaTagName(ns, tag uint32) string {
	return fmt.Sprintf("CONCAT('freshread:%d:%d:', CONNECTION_ID())", ns, tag)
}

// mariaTagQuery takes tag unless the connection holds it, and releases the
// previous member's (prev, 0: none) if the connection holds that; it
// returns one row of two columns, the first 1 when the connection holds
// tag.
func mariaTagQuery(ns, tag, prev uint32) string {
	n := mariaTagName(ns, tag)
	q := fmt.Sprintf("SELECT IF(IS_USED_LOCK(%s) = CONNECTION_ID(), 1, GET_LOCK(%s, 0))", n, n)
	if prev == 0 || prev == tag {
		return q + ", 0"
	}
	o := mariaTagName(ns, prev)
	return q + fmt.Sprintf(", IF(IS_USED_LOCK(%s) = CONNECTION_ID(), RELEASE_LOCK(%s), 0)", o, o)
}

// mariaTake checks the row of mariaTagQuery.
func mariaTake(row *sql.Row) error {
	var got, released sql.NullInt64
	if err := row.Scan(&got, &released); err != nil {
		return fmt.Errorf("plugin: tag the primary connection with this process's lease: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("plugin: tag the primary connection with this process's lease: GET_LOCK returned %v", got)
	}
	return nil
}

// beginMaria begins a transaction on a connection of db pinned for it, so
// that its tag is taken once per driver connection and member (mconns)
// and its server thread is known (mthreads, asked once per driver
// connection: abandoned_commit_mariadb.go); the connection goes back when
// the transaction ends.
func (p *Plugin) beginMaria(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*trackedTx, error) {
	sc, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	key := connKey(sc)
	thread := p.mariaThreadID(ctx, key, sc.QueryRowContext)
	tx, err := sc.BeginTx(ctx, opts)
	if err != nil {
		_ = sc.Close()
		return nil, err
	}
	return &trackedTx{Tx: tx, ctx: ctx, p: p, owned: sc, connKey: key, thread: thread}, nil
}
