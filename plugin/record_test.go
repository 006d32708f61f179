package plugin_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestRecordWrite: a write made outside the plugin (a plain connection)
// and recorded with RecordWrite raises the table's position in the store
// past the primary's position after its commit, normalized like the
// plugin's names; with a paused replica, a read of the table then goes to
// the primary and sees the row (before RecordWrite it went to the
// replica and missed it). A Plugin that was never installed
// refuses.
func TestRecordWrite(t *testing.T) {
	if err := plugin.New(plugin.Config{}).RecordWrite(context.Background(), "t"); !errors.Is(err, plugin.ErrNotInstalled) {
		t.Fatalf("RecordWrite before Use: %v, want ErrNotInstalled", err)
	}
	pg := testcluster.PostgresFor(t)
	name := pg.CreateDatabase(t)
	ctx := context.Background()
	raw, err := sql.Open("pgx", pg.PrimaryDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.ExecContext(ctx, `CREATE TABLE "Copied" (id bigint primary key, v text)`); err != nil {
		t.Fatal(err)
	}
	if err := pg.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	store := lsnstore.NewMemory()
	db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}()
	var decisions []plugin.Decision
	p := plugin.New(plugin.Config{
		Store:      store,
		Replicas:   []plugin.Replica{{Name: "r0", Dialector: postgres.Open(pg.ReplicaDSN(0, name))}},
		OnDecision: func(_ context.Context, d plugin.Decision) { decisions = append(decisions, d) },
	})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := pg.PauseReplay(ctx, 0); err != nil {
		t.Fatal(err)
	}
	defer pg.ResumeReplay(ctx, 0)

	if _, err := raw.ExecContext(ctx, `INSERT INTO "Copied" VALUES (1, 'one')`); err != nil {
		t.Fatal(err)
	}
	var after string
	if err := raw.QueryRowContext(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&after); err != nil {
		t.Fatal(err)
	}
	// The control: before RecordWrite the plugin knows nothing of the row,
	// and the paused replica, fresh for what the store holds, serves the
	// read without it.
	var rows []struct {
		ID int64
		V  string
	}
	if err := db.Table(`"Copied"`).Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 || decisions[len(decisions)-1].Target != plugin.ReplicaTarget {
		t.Fatalf("control read before RecordWrite: %d rows, decision %+v; want 0 rows from the paused replica", len(rows), decisions[len(decisions)-1])
	}
	before, _ := store.WritePosition(ctx, []string{"copied"})
	if err := p.RecordWrite(ctx, `public."Copied"`); err != nil {
		t.Fatal(err)
	}
	got, err := store.WritePosition(ctx, []string{"copied"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := lsnstore.ParseLSN(after)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Covers(lsnstore.PositionOf(want)) || got.Equal(before) {
		t.Fatalf("position of copied after RecordWrite = %v (before %v), want >= %v", got, before, want)
	}
	rows = nil
	if err := db.Table(`"Copied"`).Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("read after RecordWrite returned %d rows, want 1 (decisions %+v)", len(rows), decisions)
	}
	if last := decisions[len(decisions)-1]; last.Target != plugin.Primary {
		t.Fatalf("read after RecordWrite went to %v, want the primary", last.Target)
	}
}
