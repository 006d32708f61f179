package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/position"
)

// mysqlEngine: MySQL 8 GTID sets. A position is a transaction number of
// the primary's server_uuid: after COMMIT, the highest number of that
// source in @@GLOBAL.gtid_executed; on a replica, the largest n such that
// uuid:1-n is in its gtid_executed (its contiguous prefix, conservative
// when a multi-threaded replica applies out of order). Transactions of
// other sources (a former primary, tagged GTIDs) are not tracked; see
// docs/mariadb.md.
type mysqlEngine struct {
	uuid string // the primary's server_uuid
}

func (*mysqlEngine) dialectorName() string     { return "mysql" }
func (*mysqlEngine) dialect() classify.Dialect { return classify.MySQL }

func (m *mysqlEngine) identify(ctx context.Context, primary *sql.DB) (uint64, error) {
	var mode string
	if err := primary.QueryRowContext(ctx, "SELECT @@GLOBAL.server_uuid, @@GLOBAL.gtid_mode").Scan(&m.uuid, &mode); err != nil {
		return 0, fmt.Errorf("plugin: read server_uuid and gtid_mode: %w", err)
	}
	if mode != "ON" {
		return 0, fmt.Errorf("%w: MySQL gtid_mode is %s; turn GTIDs on or use Positions: Heartbeat", ErrConfig, mode)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "mysql-%s", m.uuid)
	return h.Sum64(), nil
}

func (m *mysqlEngine) executed(ctx context.Context, db *sql.DB) (position.MySQLGTIDSet, error) {
	var s string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&s); err != nil {
		return position.MySQLGTIDSet{}, err
	}
	set, err := position.ParseMySQLGTIDSet(s)
	if err != nil {
		return set, fmt.Errorf("plugin: %w", err)
	}
	return set, nil
}

func (m *mysqlEngine) primaryPositions(ctx context.Context, primary *sql.DB) (lsnstore.LSN, lsnstore.LSN, error) {
	pos, err := m.writePosition(ctx, primary)
	return pos, pos, err
}

func (m *mysqlEngine) writePosition(ctx context.Context, primary *sql.DB) (lsnstore.LSN, error) {
	set, err := m.executed(ctx, primary)
	if err != nil {
		return 0, err
	}
	n, err := set.Last(m.uuid)
	return lsnstore.LSN(n), err
}

func (m *mysqlEngine) replayPosition(ctx context.Context, replica *sql.DB) (lsnstore.LSN, error) {
	set, err := m.executed(ctx, replica)
	if err != nil {
		return 0, err
	}
	n, err := set.Prefix(m.uuid)
	return lsnstore.LSN(n), err
}

func (*mysqlEngine) isReplica(ctx context.Context, db *sql.DB) (bool, error) {
	rows, err := db.QueryContext(ctx, "SHOW REPLICA STATUS")
	if err != nil {
		return false, err
	}
	defer rows.Close()
	return rows.Next(), rows.Err()
}

func (*mysqlEngine) retryable(ctx context.Context, err error) bool { return mysqlRetryable(ctx, err) }
func (*mysqlEngine) readOnlyRefusal(err error) bool                { return mysqlReadOnlyRefusal(err) }
func (*mysqlEngine) readOnlyFunctions(context.Context, *sql.DB) ([]string, error) {
	return nil, nil
}

// waitApplied is MySQL's causal wait: WAIT_FOR_EXECUTED_GTID_SET returns 0
// once the replica has executed uuid:1-n, 1 on timeout. Its timeout is
// given in whole seconds (rounded up); the context's deadline enforces
// MaxWait itself (a cancelled wait costs the driver its connection).
func (m *mysqlEngine) waitApplied(ctx context.Context, replica *sql.DB, pos lsnstore.LSN, timeout time.Duration) (bool, error) {
	var r sql.NullInt64
	set := fmt.Sprintf("%s:1-%d", m.uuid, uint64(pos))
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	secs := int64(math.Ceil(timeout.Seconds()))
	if err := replica.QueryRowContext(ctx, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)", set, secs).Scan(&r); err != nil {
		return false, err
	}
	return r.Valid && r.Int64 == 0, nil
}
