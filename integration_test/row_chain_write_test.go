package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// bulkReturning is a raw write whose result is large (rows of about 2 KB
// each, computed, not stored): the server sends rows for longer than the
// client's socket buffers hold, so its implicit commit comes only after
// the client has read them.
func bulkReturning(engine string, from, to int) string {
	if engine == "mariadb" {
		return fmt.Sprintf("INSERT INTO items (id, name, version) SELECT seq, 'bulk', 0 FROM seq_%d_to_%d RETURNING id, REPEAT('x', 2000) AS pad", from, to)
	}
	return fmt.Sprintf("INSERT INTO items (id, name, version) SELECT g, 'bulk', 0 FROM generate_series(%d, %d) g RETURNING id, repeat('x', 2000) AS pad", from, to)
}

const bulkRows = 20000

// rowChainWrites are the ways GORM runs raw SQL that returns rows outside
// a transaction: on its Row chain (Row, Rows, and Scan, which reads
// through Rows) on the pool, on a connection pinned with db.Connection, in
// a Session (where the Query chain's Find too runs on the session's own
// connection). Each runs write on db and reads every row of its result;
// it returns how many.
var rowChainWrites = []struct {
	name string
	run  func(p *plugin.Plugin, db *gorm.DB, write string) (int, error)
}{
	{"Rows", func(_ *plugin.Plugin, db *gorm.DB, write string) (int, error) {
		rows, err := db.Raw(write).Rows()
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var id int
			var pad string
			if err := rows.Scan(&id, &pad); err != nil {
				return n, err
			}
			n++
		}
		return n, rows.Err()
	}},
	{"Scan", func(_ *plugin.Plugin, db *gorm.DB, write string) (int, error) {
		var out []struct {
			ID  int
			Pad string
		}
		err := db.Raw(write).Scan(&out).Error
		return len(out), err
	}},
	{"Row", func(_ *plugin.Plugin, db *gorm.DB, write string) (int, error) {
		var id int
		var pad string
		if err := db.Raw(write).Row().Scan(&id, &pad); err != nil {
			return 0, err
		}
		return bulkRows + 1, nil // Row reads one; the rest were written
	}},
	{"SessionScan", inSession((*gorm.DB).Scan)},
	{"SessionFind", inSession(func(db *gorm.DB, dest any) *gorm.DB { return db.Find(dest) })},
	{"ConnectionScan", func(_ *plugin.Plugin, db *gorm.DB, write string) (n int, err error) {
		err = db.Connection(func(conn *gorm.DB) error {
			var out []struct{ ID int }
			err := conn.Raw(write).Scan(&out).Error
			n = len(out)
			return err
		})
		return n, err
	}},
}

// inSession runs write in a Session through finish (Scan or Find).
func inSession(finish func(*gorm.DB, any) *gorm.DB) func(*plugin.Plugin, *gorm.DB, string) (int, error) {
	return func(p *plugin.Plugin, db *gorm.DB, write string) (n int, err error) {
		err = p.Session(context.Background(), db, func(tx *gorm.DB) error {
			var out []struct{ ID int }
			err := finish(tx.Raw(write), &out).Error
			n = len(out)
			return err
		})
		return n, err
	}
}

// TestRowChainWriteNeverStale: a raw write that returns rows, run outside
// a transaction through Row, Rows or Scan, commits only once its rows have
// been read. Every replica has replayed everything and is paused; right
// after the write returns, another process sharing the store reads a row
// it inserted. Publishing the write's position before the commit (when
// GORM's Row chain hands back the rows) would let that read go to a
// replica that lacks the row. Both engines.
func TestRowChainWriteNeverStale(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			e := newEngineEnv(t, engine)
			other, _ := e.open()
			for i, w := range rowChainWrites {
				t.Run(w.name, func(t *testing.T) {
					// Each write starts from replicas that have replayed
					// every earlier one: the items table's position is
					// theirs.
					e.resumeAll()
					e.waitReplicaServes(other)
					e.pauseAll()
					from := 1000 + i*100000
					n, err := w.run(e.plug, e.db, bulkReturning(engine, from, from+bulkRows))
					if err != nil {
						t.Fatal(err)
					}
					if n != bulkRows+1 {
						t.Fatalf("read %d rows of the write's result, want %d", n, bulkRows+1)
					}
					for _, id := range []int{from, from + bulkRows} {
						got := e.readItem(other, uint(id))
						if got.Name != "bulk" {
							t.Fatalf("STALE READ: %s: item %d written through %s, read by another process right after: %+v", engine, id, w.name, got)
						}
						e.mustPrimary(got, w.name+": read of a row written, every replica paused")
					}
				})
			}
		})
	}
}

// TestRowChainWritePublishedPastCommit: on PostgreSQL, the position
// published for a raw write run through Rows, Scan or Row outside a
// transaction is at or past the end of its commit record in the WAL (read
// back with pg_walinspect): a replica that has replayed it has the rows.
func TestRowChainWritePublishedPastCommit(t *testing.T) {
	// No poller after the start: it would publish nothing here, but its
	// polls would add WAL-free noise to the connection pool.
	e := newEnv(t, withConfig(func(c *plugin.Config) { c.PollInterval = time.Hour }))
	ctx := e.ctx()
	admin := e.primarySQL()
	if _, err := admin.ExecContext(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect"); err != nil {
		t.Fatal(err)
	}
	for i, w := range rowChainWrites {
		var start string
		if err := admin.QueryRowContext(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&start); err != nil {
			t.Fatal(err)
		}
		from := 1000 + i*100000
		write := fmt.Sprintf("INSERT INTO items (id, name, version) SELECT g, 'bulk', 0 FROM generate_series(%d, %d) g RETURNING id, repeat('x', 2000) AS pad", from, from+bulkRows)
		if _, err := w.run(e.plug, e.db, write); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		published, err := e.store.WritePosition(ctx, []string{"items"})
		if err != nil {
			t.Fatal(err)
		}
		var xid string
		if err := admin.QueryRowContext(ctx, "SELECT xmin::text FROM items WHERE id = $1", from).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		commitEnd := e.commitRecordEnd(admin, start, xid)
		if published.Main() < commitEnd {
			t.Fatalf("%s: published position %s is below the end of the write's commit record %s: a replica at it lacks the rows",
				w.name, published.Main(), commitEnd)
		}
	}
}
