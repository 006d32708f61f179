package plugin

import "errors"

// Errors returned by Initialize (and RecordWrite, SetReplicas), wrapped with details; test with errors.Is.
var (
	// ErrConfig: the Config is invalid (duplicate or empty replica names,
	// missing dialector, a non-PostgreSQL database).
	ErrConfig = errors.New("plugin: invalid config")
	// ErrNotReplica: a replica's server is not in recovery, i.e. the DSN
	// points at a primary. Sending reads there would be fine, but recording
	// its position as a replay position would be wrong, so it is refused.
	ErrNotReplica = errors.New("plugin: replica is not in recovery")
	// ErrDBResolver: gorm.io/plugin/dbresolver is registered on the same
	// *gorm.DB; both would route the same statements. Remove it (see the
	// migration section of the README).
	ErrDBResolver = errors.New("plugin: dbresolver is registered on this *gorm.DB")
	// ErrNotInstalled: a method that needs the primary (RecordWrite) was
	// called on a Plugin that no *gorm.DB has initialized (db.Use).
	ErrNotInstalled = errors.New("plugin: not installed on a *gorm.DB")
	// ErrClosed: SetReplicas was called on a Plugin that is closed.
	ErrClosed = errors.New("plugin: closed")
	// ErrPrivilege: the database refuses the plugin something it cannot
	// work without (PostgreSQL: the primary's WAL position to a role not
	// allowed pg_current_wal_insert_lsn()); the error names the GRANT.
	ErrPrivilege = errors.New("plugin: missing privilege")
)

// ErrWriteOnReplica is returned by a statement that would write on a
// replica: it is refused before it is sent. Writes are put on the primary
// before they run, whatever pool their statement inherited from a read; a
// statement that still reaches a replica's pool with a write is a bug
// (freshread's or another plugin's), and a replica that accepts writes
// (MariaDB or MySQL without read_only) would silently diverge.
var ErrWriteOnReplica = errors.New("plugin: write refused on a replica")

// ErrForeignTransaction is returned by a write inside a transaction the
// plugin did not begin (db.Connection, then Begin on the pinned
// connection) when the plugin cannot follow such a transaction to its
// commit: on MariaDB and MySQL that needs the PROCESS privilege
// (information_schema.INNODB_TRX). The write is refused before it is sent:
// published without its commit being seen, it could be read stale. The
// error names the GRANT; db.Transaction and Begin on the *gorm.DB are not
// affected.
var ErrForeignTransaction = errors.New("plugin: write in a transaction the plugin cannot follow")

// IsForeignTransaction reports whether err is a write refused because its
// transaction cannot be followed.
func IsForeignTransaction(err error) bool { return errors.Is(err, ErrForeignTransaction) }

// IsWriteOnReplica reports whether err is a write refused on a replica.
func IsWriteOnReplica(err error) bool { return errors.Is(err, ErrWriteOnReplica) }

// IsPrivilege reports whether err is a privilege the plugin cannot work
// without.
func IsPrivilege(err error) bool { return errors.Is(err, ErrPrivilege) }

// IsConfig reports whether err is an invalid configuration.
func IsConfig(err error) bool { return errors.Is(err, ErrConfig) }
