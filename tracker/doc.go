// Package tracker publishes what the freshread plugin cannot see by
// itself, for every database announced in the registry: each replica's
// replay position (with a short TTL, so a dead tracker is noticed), the
// dependency graph between tables (triggers, cascading foreign keys, rules,
// views; see depgraph.AnalyzePostgres and lsnstore.DependentsStore) and, by
// Mode, the write positions of writes made outside the application:
// ModeLogical decodes the WAL through a replication slot (exact),
// ModeStats polls pg_stat_user_tables (cheap, seconds late).
//
// It runs in-process:
//
//	tr, err := tracker.New(tracker.Config{Redis: rdb, DSN: dsn, Mode: tracker.ModeLogical})
//	go tr.Run(ctx)
//	http.Handle("/", tr.Handler()) // /healthz, /readyz, /metrics
//
// or as the daemon `freshread tracker`. Services announce their databases
// with Announce: host, port, database and replica names, never
// credentials; the tracker connects with its own (Config.DSN, see
// DSNTemplate) and redacts their passwords from its logs and errors.
// docs/design/tracker.md explains setup, the slot's WAL retention and both modes.
package tracker
