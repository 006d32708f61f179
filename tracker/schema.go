package tracker

import (
	"context"
	"fmt"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// The schema position (lsnstore.SchemaChanges). A plugin learns its
// dependency graph at the primary's position read just before the
// catalog, and its raises compare that with the store's schema position:
// a graph not strictly past it may predate a schema change, and the raise
// then covers every table (docs/design/unnamed-rows.md). For a schema
// change the event trigger reports (ddl.go), the tracker raises the schema
// position to a position read once the change is visible, before it
// raises the change's commit.
//
// The commit's end, which the stream gives, would not do: a transaction
// becomes visible after its commit record is flushed (and, with
// synchronous replication, acknowledged by the standbys), so a plugin may
// read a position past the commit record and then a catalog without the
// change. The tracker therefore asks, in one statement, whether the
// transaction is still running in the statement's snapshot and, when it
// is not, reads the insert position: the change was visible before that
// position was read, so a graph position strictly past it was read later,
// from a catalog that has the change.

// schemaMarkSQL reports whether the transaction $1 (the 32 bits pgoutput
// gives) is no longer running in the statement's snapshot, and the WAL
// insert position, read after the snapshot was taken.
const schemaMarkSQL = `SELECT NOT EXISTS (SELECT 1 FROM txid_snapshot_xip(txid_current_snapshot()) x WHERE x % 4294967296 = $1),
  pg_current_wal_insert_lsn()::text`

// schemaVisibleWait is how long the decoder waits for a schema change's
// transaction to become visible before it leaves the wait to a goroutine
// of its own (a synchronous standby that does not acknowledge holds it).
const schemaVisibleWait = 2 * time.Second

// markSchema raises the schema position for the schema change of
// transaction xid, whose commit the decoder has just read.
func (d *decoder) markSchema(ctx context.Context, xid uint32) error {
	deadline := time.Now().Add(schemaVisibleWait)
	var b backoff
	for {
		pos, visible, err := d.w.schemaVisible(ctx, xid)
		if err == nil && visible {
			err = d.w.writes.RaiseSchema(ctx, lsnstore.PositionOf(pos))
			if err == nil {
				return nil
			}
		}
		if err == nil && time.Now().After(deadline) {
			d.w.log.Warn("a schema change is not visible yet, its commit decoded: its schema position is raised once it is (until then, plugins that learned their graph before it may raise only the tables their graph names for writes through it)", "xid", xid)
			go d.w.markSchemaLater(ctx, xid)
			return nil
		}
		delay := time.Millisecond
		if err != nil {
			if delay = b.next(); delay >= 5*time.Second {
				return fmt.Errorf("raise the schema position of transaction %d: %w", xid, err)
			}
		}
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

// markSchemaLater is markSchema once its wait passed: it polls until the
// transaction is visible (or ctx ends), then raises the schema position.
func (w *worker) markSchemaLater(ctx context.Context, xid uint32) {
	for sleep(ctx, 10*time.Millisecond) {
		pos, visible, err := w.schemaVisible(ctx, xid)
		if err != nil || !visible {
			continue
		}
		if err := w.writes.RaiseSchema(ctx, lsnstore.PositionOf(pos)); err == nil {
			return
		}
	}
}

// schemaVisible reports whether transaction xid is no longer running, and
// the primary's position read after the snapshot that showed it.
func (w *worker) schemaVisible(ctx context.Context, xid uint32) (lsnstore.LSN, bool, error) {
	p, err := w.pool("primary")
	if err != nil {
		return 0, false, err
	}
	var (
		visible bool
		s       string
	)
	if err := p.QueryRow(ctx, schemaMarkSQL, int64(xid)).Scan(&visible, &s); err != nil {
		return 0, false, fmt.Errorf("read whether a schema change is visible: %w", err)
	}
	pos, err := lsnstore.ParseLSN(s)
	if err != nil {
		return 0, false, err
	}
	return pos, visible, nil
}
