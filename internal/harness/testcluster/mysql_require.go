package testcluster

import (
	"errors"
	"sync"
	"testing"
)

// MySQL and FRESHREAD_REQUIRE_INTEGRATION
//
// PostgreSQL and MariaDB always have a provider of last resort (the server
// binaries installed on the machine), so FRESHREAD_REQUIRE_INTEGRATION=1
// turns their absence into a failure. MySQL has none: Debian's "mysql"
// packages are MariaDB, so MySQL comes only from FRESHREAD_MYSQL_*_DSN or
// from mysql:8.4 containers on a Docker engine. CI sets
// FRESHREAD_REQUIRE_INTEGRATION=1 on a machine with neither, and must stay
// green; so the rule for MySQL is:
//
//   - no provider at all (neither FRESHREAD_MYSQL_PRIMARY_DSN set nor a
//     Docker engine reachable with FRESHREAD_DOCKER not 0): the MySQL tests
//     SKIP, with a one-line reason, even with FRESHREAD_REQUIRE_INTEGRATION=1;
//   - a provider was requested (FRESHREAD_MYSQL_PRIMARY_DSN is set, or a
//     Docker engine is reachable and would be used, as it would be for the
//     other servers) but fails: the same as for the other servers, a failure
//     with FRESHREAD_REQUIRE_INTEGRATION=1, a skip or failure (per need)
//     without it.
//
// To make CI exercise MySQL, give it a Docker engine or set the two DSNs.

// sharedMySQL is the package's MySQL pair, started on first use. It is not
// a field of require.go's shared struct: SharedMySQL registers a closer in
// shared.closers, so Shutdown stops it and also clears this slot.
var sharedMySQL struct {
	mu      sync.Mutex
	started bool
	m       *MySQL
	err     error
}

// SharedMySQL returns the package's MySQL primary and replica, starting
// them on first use. Shutdown (and so Run) stops them.
func SharedMySQL() (*MySQL, error) {
	sharedMySQL.mu.Lock()
	defer sharedMySQL.mu.Unlock()
	if !sharedMySQL.started {
		ctx, cancel := startTimeout()
		defer cancel()
		sharedMySQL.m, sharedMySQL.err = StartMySQL(ctx)
		sharedMySQL.started = true
		// Registered whatever the outcome, so Shutdown also forgets a
		// cached error (the demo and bench commands may start again).
		shared.mu.Lock()
		shared.closers = append(shared.closers, closeSharedMySQL)
		shared.mu.Unlock()
	}
	return sharedMySQL.m, sharedMySQL.err
}

func closeSharedMySQL() error {
	sharedMySQL.mu.Lock()
	m := sharedMySQL.m
	sharedMySQL.m, sharedMySQL.err, sharedMySQL.started = nil, nil, false
	sharedMySQL.mu.Unlock()
	if m == nil {
		return nil
	}
	return m.Close()
}

// MySQLFor returns the shared MySQL pair. With no MySQL provider at all it
// skips t, even when FRESHREAD_REQUIRE_INTEGRATION=1 (see above); otherwise
// it behaves like MariaDBFor.
func MySQLFor(t testing.TB) *MySQL {
	t.Helper()
	m, err := SharedMySQL()
	needMySQL(t, err)
	return m
}

// MySQLWithoutGTIDFor returns the DSN (no database) of a standalone MySQL
// 8.4 server with gtid_mode=OFF, removed when t ends. Only the container
// provider can make one: without a Docker engine t is skipped, even when
// FRESHREAD_REQUIRE_INTEGRATION=1, as for MySQLFor.
func MySQLWithoutGTIDFor(t testing.TB) string {
	t.Helper()
	ctx, cancel := startTimeout()
	defer cancel()
	if !mysqlContainers(ctx) {
		t.Skipf("integration test skipped: %v: a MySQL server with gtid_mode=OFF needs %s and a Docker engine (%s/%s name a GTID pair only)",
			ErrUnavailable, EnvMySQLImage, EnvMySQLPrimary, EnvMySQLReplica)
	}
	s, err := startDockerMySQLSingle(ctx, false)
	need(t, err)
	t.Cleanup(func() { _ = s.close() })
	return s.dsn("")
}

func needMySQL(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, errNoMySQLProvider) {
		t.Skipf("integration test skipped: %v (%s=1 does not fail this: no MySQL provider was requested)", err, EnvRequire)
	}
	need(t, err)
}
