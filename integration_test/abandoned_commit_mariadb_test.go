package integration_test

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// TestMariaDBAbandonedCommitNeverArrives is TestAbandonedCommitNeverArrives
// on MariaDB: A's COMMIT is held by the network and A gives up on it (the
// MySQL driver's COMMIT takes no context: after the DSN's readTimeout), so
// the server has the transaction open, waiting for a COMMIT that may
// arrive later. A holds the write until the transaction's server thread is
// gone: its poller ends the thread (KILL CONNECTION) once it sat idle for
// abandonedIdleLimit. Then the write is published, and the COMMIT the
// network delivers after that finds no transaction to commit. Published at
// the next poll instead (as before), the late COMMIT committed after the
// publication, and other processes would read it stale.
func TestMariaDBAbandonedCommitNeverArrives(t *testing.T) {
	e := newMariaEnv(t)
	relay, primary := e.mariaPrimaryViaRelay()
	// The driver gives up on the COMMIT after readTimeout (2 s); the
	// transaction's context only bounds the test's setup.
	a, pa, b, tx := abandonedWriters(t, e, primary, time.Minute)
	var thread uint64
	if err := tx.Raw("SELECT CONNECTION_ID()").Scan(&thread).Error; err != nil {
		t.Fatal(err)
	}
	direct, err := e.db.DB() // the primary, without the relay
	if err != nil {
		t.Fatal(err)
	}
	threadAlive := func() (alive bool, port int, err error) {
		var host string
		err = direct.QueryRow("SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = ?", thread).Scan(&host)
		if errors.Is(err, sql.ErrNoRows) {
			return false, 0, nil
		}
		if err != nil {
			return false, 0, err
		}
		_, p, err := net.SplitHostPort(host)
		if err != nil {
			return false, 0, fmt.Errorf("thread %d's host %q: %w", thread, host, err)
		}
		port, err = strconv.Atoi(p)
		return true, port, err
	}
	if err := abandonedCommitNeverArrives(e, a, pa, b, relay, tx, threadAlive); err != nil {
		t.Fatal(err)
	}
}

// mariaPrimaryViaRelay is a relay in front of the MariaDB primary (closed
// when the test ends) and a dialector of e's database through it.
func (e *env) mariaPrimaryViaRelay() (*testcluster.Relay, gorm.Dialector) {
	e.t.Helper()
	m := e.c.(mariaCluster).MariaDB
	relay, err := testcluster.NewRelay(fmt.Sprintf("%s:%d", m.Host(), m.PrimaryPort()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { relay.Close() })
	cfg, err := mysqldriver.ParseDSN(m.PrimaryDSN(e.dbName))
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.Addr = fmt.Sprintf("127.0.0.1:%d", relay.Port())
	// The MySQL driver's COMMIT takes no context: a client gives up on
	// it after the DSN's readTimeout.
	cfg.ReadTimeout = 2 * time.Second
	return relay, mysql.Open(cfg.FormatDSN())
}
