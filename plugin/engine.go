package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/internal/engines"
	"github.com/freshread/freshread/lsnstore"
)

// engine is what differs between database engines: how positions are read
// and compared, how a replica is recognised, which SQL grammar applies and
// which errors are worth a retry on the primary. Positions are
// lsnstore.Position for every engine: a PostgreSQL WAL LSN or heartbeat
// counter in the main lane, a lane per GTID domain on MariaDB, per GTID
// source on MySQL.
type engine interface {
	// dialectorName is gorm's Dialector.Name() of the engine.
	dialectorName() string
	dialect() classify.Dialect
	// identify returns a stable identifier of the replication cluster
	// (positions of different clusters cannot be compared) and prepares
	// the engine (e.g. reads the primary's GTID domain).
	identify(ctx context.Context, primary *sql.DB) (uint64, error)
	// primaryPositions returns the primary's current write position and a
	// position every replica that has reached it is fully caught up at
	// (PostgreSQL: the insert and flush positions).
	primaryPositions(ctx context.Context, primary *sql.DB) (ins, flush lsnstore.Position, err error)
	// writePosition is read after COMMIT returned: at or past the commit.
	writePosition(ctx context.Context, primary *sql.DB) (lsnstore.Position, error)
	// replayPosition is what a replica has applied.
	replayPosition(ctx context.Context, replica *sql.DB) (lsnstore.Position, error)
	// isReplica reports whether the server replicates from a primary.
	isReplica(ctx context.Context, db *sql.DB) (bool, error)
	// retryable: a replica failure after which the read may run on the
	// primary.
	retryable(ctx context.Context, err error) bool
	// readOnlyRefusal: the replica refused a statement because it is
	// read-only (a replay session then moves to the primary).
	readOnlyRefusal(err error) bool
	// learnReadOnlyFunctions lists user functions that cannot write.
	readOnlyFunctions(ctx context.Context, primary *sql.DB) ([]string, error)
}

// causalWaiter is an engine that can wait on a replica until it has
// applied a position (MariaDB's MASTER_GTID_WAIT), instead of waiting for
// the poller.
type causalWaiter interface {
	// waitApplied waits up to timeout for replica to apply pos and reports
	// whether it did.
	waitApplied(ctx context.Context, replica *sql.DB, pos lsnstore.Position, timeout time.Duration) (bool, error)
}

// engineFor picks the engine of the primary: by dialector, and for "mysql"
// by the server's version (MariaDB or MySQL).
func engineFor(ctx context.Context, dialector string, primary *sql.DB) (engine, error) {
	switch dialector {
	case "postgres":
		return pgEngine{}, nil
	case "mysql":
		if !engines.MySQLFamilyLinked() {
			return nil, engines.MySQLFamilyNotLinked("plugin", ErrConfig)
		}
		var version string
		if err := primary.QueryRowContext(ctx, "SELECT @@version").Scan(&version); err != nil {
			return nil, fmt.Errorf("plugin: read the server version: %w", err)
		}
		if strings.Contains(strings.ToLower(version), "mariadb") {
			return &mariaEngine{mysqlFamily: mysqlFamily{replication: mariadbReplication, monitor: "SLAVE MONITOR"}}, nil
		}
		return &mysqlEngine{mysqlFamily: mysqlFamily{replication: mysqlReplication, monitor: "REPLICATION CLIENT"}}, nil
	}
	return nil, fmt.Errorf("%w: dialector %q is not supported (postgres, mysql)", ErrConfig, dialector)
}

// scanLSN runs query, which returns one pg_lsn as text, and returns it as a
// position with a main lane only.
func scanLSN(ctx context.Context, db *sql.DB, query string) (lsnstore.Position, error) {
	var s string
	if err := db.QueryRowContext(ctx, query).Scan(&s); err != nil {
		return lsnstore.Position{}, err
	}
	l, err := lsnstore.ParseLSN(s)
	return lsnstore.PositionOf(l), err
}
