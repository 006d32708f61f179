package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
)

// PositionSource says where write and replay positions come from.
type PositionSource int

const (
	// Native positions (the default): PostgreSQL WAL LSNs, MariaDB GTIDs.
	Native PositionSource = iota
	// Heartbeat positions: a one-row counter table on the primary, raised
	// after each write transaction commits; the replica's copy of the
	// counter tells how far it has applied (pt-heartbeat style). It works
	// with any engine that replicates the table in commit order, without
	// GTIDs, at the price of one extra write transaction per write.
	Heartbeat
)

var heartbeatTableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// heartbeatEngine reads positions from the heartbeat table and delegates
// everything else to the native engine. A replica that has the counter
// value h has applied the bump that produced h, hence every transaction
// committed before it.
type heartbeatEngine struct {
	engine
	table string
}

func newHeartbeatEngine(base engine, table string) (*heartbeatEngine, error) {
	if !heartbeatTableName.MatchString(table) {
		return nil, fmt.Errorf("%w: HeartbeatTable %q is not a plain identifier", ErrConfig, table)
	}
	return &heartbeatEngine{engine: base, table: table}, nil
}

// identify delegates to the native engine; when the native positions are
// unusable (MySQL without GTIDs, which is what the heartbeat is for) the
// cluster is identified by the primary's server_uuid.
func (h *heartbeatEngine) identify(ctx context.Context, primary *sql.DB) (uint64, error) {
	id, err := h.engine.identify(ctx, primary)
	if err == nil || !errors.Is(err, ErrConfig) || h.engine.dialectorName() != "mysql" {
		return id, err
	}
	var uuid string
	if err := primary.QueryRowContext(ctx, "SELECT @@GLOBAL.server_uuid").Scan(&uuid); err != nil {
		return 0, fmt.Errorf("plugin: read server_uuid: %w", err)
	}
	hash := fnv.New64a()
	fmt.Fprintf(hash, "heartbeat-mysql-%s", uuid)
	return hash.Sum64(), nil
}

// prepare creates the table and its row when missing.
func (h *heartbeatEngine) prepare(ctx context.Context, primary *sql.DB) error {
	if _, err := primary.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+h.table+" (id int PRIMARY KEY, n bigint NOT NULL)"); err != nil {
		return fmt.Errorf("plugin: create the heartbeat table: %w", err)
	}
	insert := "INSERT INTO " + h.table + " (id, n) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
	if h.engine.dialectorName() == "mysql" {
		insert = "INSERT IGNORE INTO " + h.table + " (id, n) VALUES (1, 0)"
	}
	if _, err := primary.ExecContext(ctx, insert); err != nil {
		return fmt.Errorf("plugin: create the heartbeat row: %w", err)
	}
	return nil
}

func (h *heartbeatEngine) counter(ctx context.Context, db *sql.DB) (lsnstore.Position, error) {
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT n FROM "+h.table+" WHERE id = 1").Scan(&n); err != nil {
		return lsnstore.Position{}, err
	}
	return lsnstore.PositionOf(lsnstore.LSN(n)), nil
}

func (h *heartbeatEngine) primaryPositions(ctx context.Context, primary *sql.DB) (lsnstore.Position, lsnstore.Position, error) {
	n, err := h.counter(ctx, primary)
	return n, n, err
}

// writePosition raises the counter in its own transaction (after the
// write's COMMIT returned) and returns the new value.
func (h *heartbeatEngine) writePosition(ctx context.Context, primary *sql.DB) (lsnstore.Position, error) {
	if h.engine.dialectorName() == "postgres" {
		var n int64
		err := primary.QueryRowContext(ctx, "UPDATE "+h.table+" SET n = n + 1 WHERE id = 1 RETURNING n").Scan(&n)
		return lsnstore.PositionOf(lsnstore.LSN(n)), err
	}
	conn, err := primary.Conn(ctx)
	if err != nil {
		return lsnstore.Position{}, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "UPDATE "+h.table+" SET n = LAST_INSERT_ID(n + 1) WHERE id = 1"); err != nil {
		return lsnstore.Position{}, err
	}
	var n int64
	err = conn.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&n)
	return lsnstore.PositionOf(lsnstore.LSN(n)), err
}

// replayPosition reads the replica's counter with, in the same query, the
// identity of the server it reached (endpoint.go), as the native engines
// do: a replica DSN that reaches another server than the one verified is
// down until its connections agree again.
func (h *heartbeatEngine) replayPosition(ctx context.Context, replica *sql.DB) (lsnstore.Position, error) {
	si, ok := h.engine.(serverIdentifier)
	if !ok {
		return h.counter(ctx, replica)
	}
	expr := si.identityExpr()
	var (
		n  int64
		id string
	)
	if err := replica.QueryRowContext(ctx, "SELECT n, "+expr+" FROM "+h.table+" WHERE id = 1").Scan(&n, &id); err != nil {
		return lsnstore.Position{}, err
	}
	if err := checkEndpoint(ctx, replica, id); err != nil {
		return lsnstore.Position{}, err
	}
	return lsnstore.PositionOf(lsnstore.LSN(n)), nil
}

// errUnsupportedByEngine: the base engine of a heartbeat engine cannot do
// what was asked.
var errUnsupportedByEngine = errors.New("plugin: not supported by the database engine")

// The heartbeat changes how positions are read, not how foreign
// transactions and replication threads are observed: those go to the base
// engine when it can.

func (h *heartbeatEngine) txID(ctx context.Context, q gorm.ConnPool) (string, error) {
	if tw, ok := h.engine.(txWatcher); ok {
		return tw.txID(ctx, q)
	}
	return "", errUnsupportedByEngine
}

func (h *heartbeatEngine) txEnded(ctx context.Context, primary *sql.DB, id string) (bool, error) {
	if tw, ok := h.engine.(txWatcher); ok {
		return tw.txEnded(ctx, primary, id)
	}
	return false, errUnsupportedByEngine
}

func (h *heartbeatEngine) txCheckInterval() time.Duration {
	if tw, ok := h.engine.(txWatcher); ok {
		return tw.txCheckInterval()
	}
	return 0
}

func (h *heartbeatEngine) replicationStatus(ctx context.Context, replica *sql.DB) (replicationStatus, error) {
	if rr, ok := h.engine.(replicationReporter); ok {
		return rr.replicationStatus(ctx, replica)
	}
	return replicationStatus{}, errUnsupportedByEngine
}

func (h *heartbeatEngine) monitorPrivilege() string {
	if pp, ok := h.engine.(monitorPrivileger); ok {
		return pp.monitorPrivilege()
	}
	return ""
}
