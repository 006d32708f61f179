package testcluster

// Environment variables that point the tests at servers that are already
// running instead of starting them. When one is set, that provider wins.
const (
	// EnvPostgresPrimary is a PostgreSQL URL of a superuser on the primary,
	// e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
	EnvPostgresPrimary = "FRESHREAD_PG_PRIMARY_URL"
	// EnvPostgresReplicas is a comma-separated list of URLs, one per streaming
	// replica of that primary (superuser, for pg_wal_replay_pause).
	EnvPostgresReplicas = "FRESHREAD_PG_REPLICA_URLS"
	// EnvMariaDBPrimary is a go-sql-driver/mysql DSN of a privileged user on
	// the MariaDB primary, e.g. root:@tcp(127.0.0.1:3306)/.
	EnvMariaDBPrimary = "FRESHREAD_MARIADB_PRIMARY_DSN"
	// EnvMariaDBReplica is the DSN of the GTID replica of that primary.
	EnvMariaDBReplica = "FRESHREAD_MARIADB_REPLICA_DSN"
	// EnvRedisAddr is host:port of a Redis server the tests may flush.
	EnvRedisAddr = "FRESHREAD_REDIS_ADDR"
	// EnvRequire set to 1 turns a missing server into a test failure instead
	// of a skip. CI sets it.
	EnvRequire = "FRESHREAD_REQUIRE_INTEGRATION"
	// EnvNoLocal set to 1 disables the local-binary provider, as on a
	// machine without the servers (to check the skip path).
	EnvNoLocal = "FRESHREAD_NO_LOCAL_SERVERS"
	// EnvDocker chooses the container provider: 0 never (local binaries),
	// 1 always (no Docker engine is then an error), unset when an engine
	// answers.
	EnvDocker = "FRESHREAD_DOCKER"
)
