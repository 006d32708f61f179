package integration_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

// TestWriterCutFromRedisNeverReadsStale: process A reaches Redis through a
// relay the test cuts, process B reaches it directly. With every replica
// paused, A writes a row by key (GORM Update, raw UPDATE) and in a
// transaction while it cannot reach Redis; a write A acknowledged must be
// read fresh by B, by key, by table and through raw SQL, and a write A
// refused must not have committed. The relay cuts two ways: holding
// every byte (a network that drops packets: nothing breaks, nothing
// answers, and what was sent arrives once it heals) and resetting every
// connection (a firewall, a server gone for A only). Before writer leases
// every acknowledged write here was read stale by B.
func TestWriterCutFromRedisNeverReadsStale(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			for _, cut := range []string{"drop", "reset"} {
				t.Run(cut, func(t *testing.T) { writerCut(t, engine, cut, 1500*time.Millisecond) })
			}
		})
	}
}

// TestWriterCutWithoutLeaseReadsStale shows what the test above guards
// against: with leases off (Config.WriterLease negative, documented as
// giving up this guarantee), a write acknowledged by a process cut off
// from Redis is read stale by another.
func TestWriterCutWithoutLeaseReadsStale(t *testing.T) {
	e, a, b, relay := writerCutEnv(t, "postgres", -1)
	seedItem(t, e, b, 1)
	e.pauseAll()
	relay.Refuse(true)
	if err := setName(a, 1); err != nil {
		t.Fatalf("A's write without a lease: %v", err)
	}
	if got := e.readItem(b, 1); got.Name != "old" || !e.isReplica(got.Port) {
		t.Fatalf("with leases off, B read %+v after A's write: the window this guards against did not open (the test cannot tell fresh from stale)", got)
	}
	relay.Refuse(false)
	e.resumeAll()
}

// writerCutEnv opens A (through a relay to Redis) and B (direct), both
// with lease, on a fresh database of engine.
func writerCutEnv(t *testing.T, engine string, lease time.Duration) (*env, *gorm.DB, *gorm.DB, *testcluster.Relay) {
	e, a, _, b, relay := writerCutPlugins(t, engine, lease)
	return e, a, b, relay
}

// writerCutPlugins is writerCutEnv, with A's plugin.
func writerCutPlugins(t *testing.T, engine string, lease time.Duration, aOpts ...envOpt) (*env, *gorm.DB, *plugin.Plugin, *gorm.DB, *testcluster.Relay) {
	t.Helper()
	direct, r := newRedisStore(t, "cut-"+t.Name())
	cutStore, relay := storeThroughRelay(t, r, "cut-"+t.Name())
	leased := withConfig(func(c *plugin.Config) {
		c.WriterLease = lease
		c.PublishTimeout = 300 * time.Millisecond
	})
	e := newEngineEnv(t, engine, withStore(direct), leased)
	a, pa := e.open(append([]envOpt{withStore(cutStore), leased}, aOpts...)...)
	b, _ := e.open(withStore(direct), leased)
	return e, a, pa, b, relay
}

// seedItem creates item id ("old"), lets the replicas replay it and checks
// that b reads it from a replica.
func seedItem(t *testing.T, e *env, b *gorm.DB, id uint) {
	t.Helper()
	if err := e.db.Create(&Item{ID: id, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.waitCaughtUp()
	e.waitPollersCaughtUp()
	e.eventuallyReplica(func() served { return e.readItem(b, id) }, fmt.Sprintf("B's read of item %d before the cut", id))
}

func writerCut(t *testing.T, engine, cut string, lease time.Duration) {
	e, a, pa, b, relay := writerCutPlugins(t, engine, lease)
	writes := []struct {
		name  string
		write func(db *gorm.DB, id uint) error
	}{
		{"gorm-update", setName},
		{"raw-update", func(db *gorm.DB, id uint) error {
			return db.Exec("UPDATE items SET name = 'new', version = 2 WHERE id = ?", id).Error
		}},
		{"transaction", func(db *gorm.DB, id uint) error {
			return db.Transaction(func(tx *gorm.DB) error { return setName(tx, id) })
		}},
	}
	acked, refused := 0, 0
	for round := range 2 {
		for i, w := range writes {
			id := uint(100*round + i + 1)
			seedItem(t, e, b, id)
			e.pauseAll()
			switch cut {
			case "drop":
				relay.Partition(true)
			case "reset":
				relay.Refuse(true)
			}
			if round == 1 {
				// Cut for longer than the lease: A must refuse.
				time.Sleep(lease + 200*time.Millisecond)
			}
			err := w.write(a, id)
			switch {
			case err == nil:
				acked++
				for what, got := range map[string]string{
					"by key":   e.readItem(b, id).Name,
					"by table": nameByTable(t, b, id),
					"raw SQL":  nameRaw(t, b, id),
				} {
					if got != "new" {
						t.Fatalf("round %d, %s: A acknowledged its write; B's read %s: STALE READ %q", round, w.name, what, got)
					}
				}
			case errors.Is(err, plugin.ErrStoreUnreachable):
				refused++
				var name string
				if err := e.db.Raw("SELECT name FROM items WHERE id = ?", id).Scan(&name).Error; err != nil {
					t.Fatal(err)
				}
				if name != "old" {
					t.Fatalf("round %d, %s: A refused its write (%v), but the primary holds %q: it committed", round, w.name, err, name)
				}
			default:
				t.Fatalf("round %d, %s: A's write: %v", round, w.name, err)
			}
			relay.Partition(false)
			relay.Refuse(false)
			e.resumeAll()
			waitWritable(t, a, id)
		}
	}
	if n := pluginMetric(t, pa, "freshread_writes_fenced_total"); n < float64(refused) {
		t.Errorf("freshread_writes_fenced_total = %v after %d refused writes", n, refused)
	}
	if n := pluginMetric(t, pa, "freshread_writes_unprotected_total"); n != 0 {
		t.Errorf("freshread_writes_unprotected_total = %v", n)
	}
	if acked == 0 || refused == 0 {
		t.Fatalf("%d writes acknowledged, %d refused: want both (acknowledged within the lease, refused past it)", acked, refused)
	}
	t.Logf("%s, %s cut: %d writes acknowledged and read fresh by another process, %d refused and not committed", engine, cut, acked, refused)
}

// waitWritable waits until A, the cut healed, writes again (its lease
// renewed): a write that succeeds is harmless (the replicas are running).
func waitWritable(t *testing.T, a *gorm.DB, id uint) {
	t.Helper()
	for i := 0; ; i++ {
		err := a.Exec("UPDATE items SET version = version WHERE id = ?", id).Error
		if err == nil {
			return
		}
		if !errors.Is(err, plugin.ErrStoreUnreachable) || i > 200 {
			t.Fatalf("A after the cut healed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nameByTable reads item id's name by a read that is not pinned to a key.
func nameByTable(t *testing.T, db *gorm.DB, id uint) string {
	t.Helper()
	var items []Item
	if err := db.Order("id").Find(&items).Error; err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.ID == id {
			return it.Name
		}
	}
	return ""
}

// nameRaw reads item id's name through raw SQL.
func nameRaw(t *testing.T, db *gorm.DB, id uint) string {
	t.Helper()
	var name string
	if err := db.Raw("SELECT name FROM items WHERE id = ?", id).Scan(&name).Error; err != nil {
		t.Fatal(err)
	}
	return name
}

// TestWriterCutPinnedConnection: on a connection pinned with
// db.Connection, a write outside a transaction, the COMMIT of a
// transaction begun in raw SQL, and the writes of a transaction GORM
// begins on it (whose COMMIT the plugin does not see) are refused before
// they are sent once the process has been cut from Redis past its lease;
// nothing commits, and the caller's ROLLBACK ends the transaction.
func TestWriterCutPinnedConnection(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			const lease = time.Second
			e, a, b, relay := writerCutEnv(t, engine, lease)
			seedItem(t, e, b, 1)
			seedItem(t, e, b, 2)
			seedItem(t, e, b, 3)
			err := a.Connection(func(pinned *gorm.DB) error {
				// Each statement in a session of its own: GORM keeps the
				// first error on the *gorm.DB Connection passes.
				tx := pinned.Session(&gorm.Session{})
				if err := tx.Exec("BEGIN").Error; err != nil {
					return err
				}
				if err := tx.Exec("UPDATE items SET name = 'new' WHERE id = ?", 1).Error; err != nil {
					return err
				}
				relay.Refuse(true)
				time.Sleep(lease + 200*time.Millisecond)
				commit := tx.Exec("COMMIT").Error
				if !errors.Is(commit, plugin.ErrStoreUnreachable) {
					t.Errorf("COMMIT of a raw transaction past the lease: %v, want ErrStoreUnreachable", commit)
				}
				if err := tx.Exec("ROLLBACK").Error; err != nil {
					t.Errorf("ROLLBACK after the refused COMMIT: %v", err)
				}
				auto := tx.Exec("UPDATE items SET name = 'new' WHERE id = ?", 2).Error
				if !errors.Is(auto, plugin.ErrStoreUnreachable) {
					t.Errorf("an autocommit write on the pinned connection past the lease: %v, want ErrStoreUnreachable", auto)
				}
				// A transaction GORM begins on the pinned connection
				// commits where the plugin cannot see it: its writes are
				// refused as they are sent.
				inTx := pinned.Session(&gorm.Session{}).Transaction(func(gtx *gorm.DB) error {
					if err := gtx.Exec("UPDATE items SET name = 'new' WHERE id = ?", 3).Error; err != nil {
						return err
					}
					return gtx.Model(&Item{ID: 3}).Update("version", 2).Error
				})
				if !errors.Is(inTx, plugin.ErrStoreUnreachable) {
					t.Errorf("a write in a transaction begun on the pinned connection past the lease: %v, want ErrStoreUnreachable", inTx)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			relay.Refuse(false)
			for _, id := range []uint{1, 2, 3} {
				var name string
				if err := e.db.Raw("SELECT name FROM items WHERE id = ?", id).Scan(&name).Error; err != nil {
					t.Fatal(err)
				}
				if name != "old" {
					t.Fatalf("item %d holds %q on the primary: a refused write committed", id, name)
				}
			}
		})
	}
}
