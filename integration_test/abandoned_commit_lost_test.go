package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

// TestAbandonedCommitNeverArrives: A's COMMIT is held by the network (the
// relay holds everything sent on A's connection to the primary, both ways)
// and A gives up on it, so the server has the transaction idle, waiting
// for a COMMIT that has not arrived and may arrive later. A holds the
// write (its outcome is unknown) until the transaction cannot commit any
// more: its poller ends the server process after abandonedIdleLimit.
// Then the write is published, and the COMMIT the network delivers after
// that finds no transaction to commit: the row keeps its old value, which
// both processes read, from the paused replicas too. Without the poller
// ending the transaction, A would hold the write for as long as the
// network held the COMMIT (here: never published); a plugin that
// published it without ending the transaction would let the late COMMIT
// commit after the publication, which other processes would read stale.
func TestAbandonedCommitNeverArrives(t *testing.T) {
	store, _ := newRedisStore(t, "abandoned-lost-"+t.Name())
	e := newEnv(t, withStore(store))
	relay, primary := e.primaryViaRelay()
	// pgx gives up on the COMMIT when the transaction's context ends.
	a, pa, b, tx := abandonedWriters(t, e, primary, time.Second, withStore(store))
	var pid int
	if err := tx.Raw("SELECT pg_backend_pid()").Scan(&pid).Error; err != nil {
		t.Fatal(err)
	}
	direct, err := e.db.DB() // the primary, without the relay
	if err != nil {
		t.Fatal(err)
	}
	backendAlive := func() (alive bool, port int, err error) {
		err = direct.QueryRow("SELECT client_port FROM pg_stat_activity WHERE pid = $1", pid).Scan(&port)
		if errors.Is(err, sql.ErrNoRows) {
			return false, 0, nil
		}
		return err == nil, port, err
	}
	if err := abandonedCommitNeverArrives(e, a, pa, b, relay, tx, backendAlive); err != nil {
		t.Fatal(err)
	}
}

// abandonedWriters opens A (its primary through primary) and B, seeds item
// 1 as "old", read by B from a replica, and has A begin a transaction,
// with a context ending after giveUp, that renames item 1.
func abandonedWriters(t *testing.T, e *env, primary gorm.Dialector, giveUp time.Duration, opts ...envOpt) (a *gorm.DB, pa *plugin.Plugin, b *gorm.DB, tx *gorm.DB) {
	t.Helper()
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	a, pa = e.open(append(opts, withPrimary(primary))...)
	b, _ = e.open(opts...)
	if err := a.Create(&Item{ID: 2, Name: "warm"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.eventuallyReplica(func() served { return e.readItem(b, 1) }, "B before the write")
	ctx, cancel := context.WithTimeout(context.Background(), giveUp)
	t.Cleanup(cancel)
	tx = a.WithContext(ctx).Begin()
	if err := setName(tx, 1); err != nil {
		t.Fatal(err)
	}
	return a, pa, b, tx
}

// abandonedCommitNeverArrives holds the connection of A's transaction tx
// (alive: whether its server process or thread is still there, and its
// client port) in relay, has A give up on its COMMIT, and checks that A
// ends the transaction and publishes the write, and that the COMMIT the
// network delivers after that commits nothing: item 1 stays "old" for A,
// for B and on the primary. The first failure is returned.
func abandonedCommitNeverArrives(e *env, a *gorm.DB, pa *plugin.Plugin, b *gorm.DB, relay *testcluster.Relay, tx *gorm.DB, alive func() (bool, int, error)) error {
	ok, port, err := alive()
	if err != nil {
		return err
	}
	if !ok || !relay.HoldConn(port, true) {
		return fmt.Errorf("A's transaction's connection (client port %d) is not one of the relay's", port)
	}
	held := true
	defer func() {
		if held {
			relay.HoldConn(port, false)
		}
	}()
	if err := tx.Commit().Error; err == nil {
		return errors.New("A's COMMIT succeeded while the network held it")
	}
	// Nothing has committed; A's reads and B's see the old row.
	for _, db := range []struct {
		name string
		read func() served
	}{{"A", func() served { return e.readItem(a, 1) }}, {"B", func() served { return e.readItem(b, 1) }}} {
		if got := db.read(); got.Name != "old" {
			return fmt.Errorf("%s read %+v while the COMMIT was held, want \"old\"", db.name, got)
		}
	}

	// A's poller ends the transaction after abandonedIdleLimit, then
	// publishes the write.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, _, err := alive()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the transaction whose COMMIT never arrived was never ended: A holds its write for as long as the network holds the COMMIT")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for pluginMetric(e.t, pa, "freshread_unpublished_writes") != 0 {
		if time.Now().After(deadline) {
			return errors.New("A never published the write once its transaction had ended")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The network delivers the COMMIT now, with every replica paused: it
	// must find nothing to commit.
	e.pauseAll()
	relay.HoldConn(port, false)
	held = false
	time.Sleep(300 * time.Millisecond)
	if got := readPrimaryName(e.t, e, 1); got != "old" {
		return fmt.Errorf("the COMMIT delivered after A published committed (the row is %q): other processes may have read it stale", got)
	}
	for i := range 5 {
		if got := e.readItem(b, 1); got.Name != "old" {
			return fmt.Errorf("B's read %d: %+v, want \"old\"", i, got)
		}
		if got := e.readItem(a, 1); got.Name != "old" {
			return fmt.Errorf("A's read %d: %+v, want \"old\"", i, got)
		}
	}
	return nil
}

// primaryViaRelay is a relay in front of the PostgreSQL primary (closed
// when the test ends) and a dialector of e's database through it.
func (e *env) primaryViaRelay() (*testcluster.Relay, gorm.Dialector) {
	e.t.Helper()
	relay, err := testcluster.NewRelay(fmt.Sprintf("%s:%d", e.pg.Host(), e.pg.PrimaryPort()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { relay.Close() })
	u, err := url.Parse(e.pg.PrimaryDSN(e.dbName))
	if err != nil {
		e.t.Fatal(err)
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d", relay.Port())
	return relay, postgres.Open(u.String())
}
