package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/position"
)

// mysqlEngine: MySQL 8 GTID sets. A position has a lane per GTID source
// (server UUID, or UUID:tag): after COMMIT, each source's highest number
// in @@GLOBAL.gtid_executed; on a replica, the largest n such that
// source:1-n is in its gtid_executed (its contiguous prefix, conservative
// when a multi-threaded replica applies out of order). See
// docs/design/mariadb.md.
type mysqlEngine struct {
	mysqlFamily
	uuid string // the primary's server_uuid, for the cluster identity
}

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
	return parseExecuted(s)
}

func parseExecuted(s string) (position.MySQLGTIDSet, error) {
	set, err := position.ParseMySQLGTIDSet(s)
	if err != nil {
		return set, fmt.Errorf("plugin: gtid_executed: %w", err)
	}
	return set, nil
}

// mysqlPosition maps per-source transaction numbers to a position with a
// lane per source (the main lane stays 0).
func mysqlPosition(sources []position.SourceNumber) (lsnstore.Position, error) {
	lanes := make([]lsnstore.Lane, len(sources))
	for i, sn := range sources {
		lanes[i] = lsnstore.Lane{Name: sn.Source, Value: lsnstore.LSN(sn.Number)}
	}
	p, err := lsnstore.NewPosition(0, lanes...)
	if err != nil {
		return p, fmt.Errorf("plugin: %w", err)
	}
	return p, nil
}

func (m *mysqlEngine) primaryPositions(ctx context.Context, primary *sql.DB) (lsnstore.Position, lsnstore.Position, error) {
	pos, err := m.writePosition(ctx, primary)
	return pos, pos, err
}

func (m *mysqlEngine) writePosition(ctx context.Context, primary *sql.DB) (lsnstore.Position, error) {
	set, err := m.executed(ctx, primary)
	if err != nil {
		return lsnstore.Position{}, err
	}
	return mysqlPosition(set.Lasts())
}

// replayPosition reads @@gtid_executed and, in the same query, the
// server's identity (endpoint.go), which must be the one verified.
func (m *mysqlEngine) replayPosition(ctx context.Context, replica *sql.DB) (lsnstore.Position, error) {
	var s, id string
	if err := replica.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed, "+mysqlIdentity).Scan(&s, &id); err != nil {
		return lsnstore.Position{}, err
	}
	if err := checkEndpoint(ctx, replica, id); err != nil {
		return lsnstore.Position{}, err
	}
	set, err := parseExecuted(s)
	if err != nil {
		return lsnstore.Position{}, err
	}
	return mysqlPosition(set.Prefixes())
}

// mysqlWaitSet is the GTID set a replica must have executed to cover pos:
// source:1-n for each lane ("uuid:1-n", "uuid:tag:1-n").
func mysqlWaitSet(pos lsnstore.Position) string {
	var b []byte
	for _, l := range pos.Lanes() {
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%s:1-%d", l.Name, uint64(l.Value))
	}
	return string(b)
}

// waitApplied is MySQL's causal wait: WAIT_FOR_EXECUTED_GTID_SET returns 0
// once the replica has executed source:1-n for every lane, 1 on timeout.
// Its timeout is given in whole seconds (rounded up); the context's
// deadline enforces MaxWait itself (a cancelled wait costs the driver its
// connection).
func (m *mysqlEngine) waitApplied(ctx context.Context, replica *sql.DB, pos lsnstore.Position, timeout time.Duration) (bool, error) {
	set := mysqlWaitSet(pos)
	if set == "" {
		return true, nil
	}
	var r sql.NullInt64
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	secs := int64(math.Ceil(timeout.Seconds()))
	if err := replica.QueryRowContext(ctx, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)", set, secs).Scan(&r); err != nil {
		return false, err
	}
	return r.Valid && r.Int64 == 0, nil
}
