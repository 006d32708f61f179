// Package testcluster starts real, replicated database servers for tests,
// the demo and the benchmarks: a PostgreSQL primary with streaming replicas,
// a MariaDB primary with a GTID replica, and a Redis server, each on
// ephemeral loopback ports with data in a temporary directory.
//
// Providers are tried in order: servers named by environment variables
// (see EnvPostgresPrimary and its siblings), containers when a Docker engine
// is reachable, and the server binaries installed on the machine. When none
// can supply a server, tests skip with a message naming what to install,
// unless FRESHREAD_REQUIRE_INTEGRATION=1, where they fail.
//
// Servers are shared by the tests of one package: TestMain calls Run, the
// first test that asks for a server starts it, and Run stops them all after
// the last test. Server processes carry a parent-death signal, so they also
// die when the test binary crashes.
package testcluster
