// Package classify classifies raw SQL as READ, BUFFER or WRITE and reports
// the tables it reads and writes, so that the freshread GORM plugin can send
// reads to replicas without stale reads (the replay-on-write design: BUFFER
// statements run on the replica and are replayed on the primary when the
// session moves there).
//
//	c := classify.New(classify.Config{Dialect: classify.Postgres})
//	r := c.Classify(`SELECT * FROM "users" WHERE "users"."id" = $1`)
//	// r.Kind == classify.Read, r.Reads == []string{"users"}
//
// # Kinds
//
//   - Read: no side effect at all; safe on a read-only replica.
//   - Buffer: side effects that live only in the current session: session
//     SET, user variables (@x := ..., SELECT ... INTO @x), temporary tables
//     (CREATE TEMP TABLE, SELECT ... INTO TEMP, writes to temporary tables
//     created earlier in the same text), PREPARE/DEALLOCATE, cursors,
//     LISTEN, BEGIN/START TRANSACTION, SAVEPOINT, set_config(),
//     LAST_INSERT_ID(expr).
//   - Write: everything else, including anything that cannot be shown to be
//     Read or Buffer (unknown and user-defined functions, CALL, DO, EXECUTE,
//     unrecognized or unparseable text).
//
// The kind of a text holding several statements is the most severe one.
//
// # Locking policy
//
// A locking read (FOR UPDATE / NO KEY UPDATE / SHARE / KEY SHARE anywhere in
// the statement tree, MySQL LOCK IN SHARE MODE), LOCK TABLE(S), UNLOCK
// TABLES and advisory or user-level lock functions (pg_advisory_*lock*,
// GET_LOCK, RELEASE_LOCK, IS_FREE_LOCK, IS_USED_LOCK) are Write with
// Result.Locks set: locks must be taken on the primary, where the other
// sessions they coordinate with run.
//
// # Transaction policy
//
// BEGIN and START TRANSACTION are Buffer (they only change session state
// and are replayed on the primary). COMMIT, ROLLBACK, END, ABORT and
// ROLLBACK TO SAVEPOINT are Write with Reason ReasonTxnEnd: ending a
// transaction is routed like a write, as the replay-on-write design does.
// A caller that tracks its own transaction state (for instance, a
// transaction that only ran Read and Buffer statements on a replica) may
// recognize ReasonTxnEnd and keep such a COMMIT on the replica. Two-phase
// commit statements (PREPARE TRANSACTION, COMMIT/ROLLBACK PREPARED, XA) are
// Write.
//
// # Table names
//
// PostgreSQL unquoted identifiers are folded to lower case and quoted ones
// kept verbatim; MySQL names are lower-cased. Schema-qualified names are
// returned as "schema.table" (a leading catalog of a three-part name is
// dropped); the caller strips its default schema. CTE names are not tables.
// Temporary tables created earlier in the same text are not listed.
//
// # Engines
//
// PostgreSQL text is handled by a pure-Go lexer (comments, nested block
// comments, plain, E'...', U&'...', B'...' and X'...' strings, dollar quoting, quoted
// identifiers) and a token-level analyzer that tracks parenthesis frames,
// CTE scopes, FROM/JOIN/USING/UPDATE/INTO targets, function calls and
// locking clauses. MySQL and MariaDB text is split by a MySQL lexer and each
// statement parsed with TiDB's parser (pure Go); statements TiDB rejects
// fall back to the same token-level analyzer, which never answers Read
// unless the statement is a query or SHOW/DESCRIBE without side effects.
// Both build with CGO_ENABLED=0.
//
// The lexers assume the default server settings: standard_conforming_strings
// on (PostgreSQL) and backslash escapes on with "..." as strings (MySQL,
// sql_mode without NO_BACKSLASH_ESCAPES or ANSI_QUOTES).
//
// # Caching and sharing
//
// Classify caches results in a sharded LRU keyed by the SQL text (GORM
// repeats the same text with placeholders). Results returned from the cache
// are shared between callers: do not modify a Result's Reads or Writes
// slices. A Classifier is safe for concurrent use and Classify never
// panics; an internal error yields Write with Reason "unparseable".
package classify
