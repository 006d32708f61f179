package tracker

import (
	"context"
	"fmt"
	"time"
)

// The schema generation (lsnstore.SchemaChanges). A plugin reads the
// store's schema generation just before it reads the catalog its
// dependency graph comes from, and its raises compare that with the
// store's: a graph learned before the generation moved may predate a
// schema change, and the raise then covers every table
// (docs/design/unnamed-rows.md). For a schema change the event trigger
// reports (ddl.go), the tracker advances the generation once the change
// is visible, before it raises the change's commit.
//
// Decoding the commit is not enough: a transaction becomes visible after
// its commit record is flushed (and, with synchronous replication,
// acknowledged by the standbys), so a plugin could read the generation
// and then a catalog without the change. The tracker therefore asks
// whether the transaction is still running in a fresh snapshot, and
// advances the generation only once it is not: a graph that read the
// advanced generation read its catalog later, with the change.

// schemaVisibleSQL reports whether the transaction $1 (the 32 bits
// pgoutput gives) is no longer running in the statement's snapshot.
const schemaVisibleSQL = `SELECT NOT EXISTS (SELECT 1 FROM txid_snapshot_xip(txid_current_snapshot()) x WHERE x % 4294967296 = $1)`

// schemaVisibleWait is how long the decoder waits for a schema change's
// transaction to become visible before it leaves the wait to a goroutine
// of its own (a synchronous standby that does not acknowledge holds it).
const schemaVisibleWait = 2 * time.Second

// markSchema advances the schema generation for the schema change of
// transaction xid, whose commit the decoder has just read.
func (d *decoder) markSchema(ctx context.Context, xid uint32) error {
	deadline := time.Now().Add(schemaVisibleWait)
	var b backoff
	for {
		visible, err := d.w.schemaVisible(ctx, xid)
		if err == nil && visible {
			err = d.w.writes.AdvanceSchema(ctx)
			if err == nil {
				return nil
			}
		}
		if err == nil && time.Now().After(deadline) {
			d.w.log.Warn("a schema change is not visible yet, its commit decoded: the schema generation is advanced once it is (until then, plugins that learned their graph before it may raise only the tables their graph names for writes through it)", "xid", xid)
			go d.w.markSchemaLater(ctx, xid)
			return nil
		}
		delay := time.Millisecond
		if err != nil {
			if delay = b.next(); delay >= 5*time.Second {
				return fmt.Errorf("advance the schema generation for transaction %d: %w", xid, err)
			}
		}
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

// markSchemaLater is markSchema once its wait passed: it polls until the
// transaction is visible (or ctx ends), then advances the generation.
func (w *worker) markSchemaLater(ctx context.Context, xid uint32) {
	for sleep(ctx, 10*time.Millisecond) {
		visible, err := w.schemaVisible(ctx, xid)
		if err != nil || !visible {
			continue
		}
		if err := w.writes.AdvanceSchema(ctx); err == nil {
			return
		}
	}
}

// schemaVisible reports whether transaction xid is no longer running.
func (w *worker) schemaVisible(ctx context.Context, xid uint32) (bool, error) {
	p, err := w.pool("primary")
	if err != nil {
		return false, err
	}
	var visible bool
	if err := p.QueryRow(ctx, schemaVisibleSQL, int64(xid)).Scan(&visible); err != nil {
		return false, fmt.Errorf("read whether a schema change is visible: %w", err)
	}
	return visible, nil
}
