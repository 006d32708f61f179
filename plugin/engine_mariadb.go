package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/position"
)

// mariaEngine: MariaDB GTIDs. A position is the sequence number of the
// primary's GTID domain (@@gtid_domain_id): with gtid_strict_mode the
// sequence numbers of one domain only grow, and a replica applies them in
// order, so "has applied" is a number comparison. Writes in another domain
// are not tracked (see docs/mariadb.md).
type mariaEngine struct {
	domain   uint32
	serverID uint32

	// lastBinlog is the primary's gtid_binlog_pos at the previous poll
	// (poller goroutine only); otherDomains is set once a domain other
	// than the tracked one has advanced: writes the rule cannot see.
	lastBinlog   position.MariaDBGTIDList
	otherDomains atomic.Bool
}

func (*mariaEngine) dialectorName() string     { return "mysql" }
func (*mariaEngine) dialect() classify.Dialect { return classify.MySQL }

func (m *mariaEngine) identify(ctx context.Context, primary *sql.DB) (uint64, error) {
	if err := primary.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_domain_id, @@GLOBAL.server_id").Scan(&m.domain, &m.serverID); err != nil {
		return 0, fmt.Errorf("plugin: read gtid_domain_id: %w", err)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "mariadb-domain-%d", m.domain)
	return h.Sum64(), nil
}

func (m *mariaEngine) seqOf(ctx context.Context, db *sql.DB, variable string) (lsnstore.LSN, error) {
	var s string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL."+variable).Scan(&s); err != nil {
		return 0, err
	}
	seq, err := gtidSeq(s, m.domain)
	return lsnstore.LSN(seq), err
}

func (m *mariaEngine) primaryPositions(ctx context.Context, primary *sql.DB) (lsnstore.LSN, lsnstore.LSN, error) {
	var s string
	if err := primary.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&s); err != nil {
		return 0, 0, err
	}
	l, err := position.ParseMariaDBGTIDList(s)
	if err != nil {
		return 0, 0, fmt.Errorf("plugin: %w", err)
	}
	if !m.lastBinlog.Empty() && !m.sameOutsideDomain(l) {
		m.otherDomains.Store(true)
	}
	m.lastBinlog = l
	seq, _ := l.Seq(m.domain)
	return lsnstore.LSN(seq), lsnstore.LSN(seq), nil
}

// sameOutsideDomain reports whether l and the previous poll's list agree
// on every domain but the tracked one.
func (m *mariaEngine) sameOutsideDomain(l position.MariaDBGTIDList) bool {
	for _, d := range append(l.Domains(), m.lastBinlog.Domains()...) {
		if d == m.domain {
			continue
		}
		a, _ := l.Seq(d)
		b, _ := m.lastBinlog.Seq(d)
		if a != b {
			return false
		}
	}
	return true
}

// untrackedWrites reports whether writes in another GTID domain were seen.
func (m *mariaEngine) untrackedWrites() bool { return m.otherDomains.Load() }

// writePosition reads @@gtid_binlog_pos after COMMIT returned: it contains
// the transaction's GTID (and maybe later ones: conservative).
func (m *mariaEngine) writePosition(ctx context.Context, primary *sql.DB) (lsnstore.LSN, error) {
	return m.seqOf(ctx, primary, "gtid_binlog_pos")
}

func (m *mariaEngine) replayPosition(ctx context.Context, replica *sql.DB) (lsnstore.LSN, error) {
	return m.seqOf(ctx, replica, "gtid_slave_pos")
}

// waitApplied runs MASTER_GTID_WAIT on the replica (MaxScale's causal
// reads): it returns 0 once the replica has applied the GTID of the
// domain's sequence number, -1 on timeout. Ordering within a domain does
// not depend on the server id in the GTID.
func (m *mariaEngine) waitApplied(ctx context.Context, replica *sql.DB, pos lsnstore.LSN, timeout time.Duration) (bool, error) {
	gtid := fmt.Sprintf("%d-%d-%d", m.domain, m.serverID, uint64(pos))
	var r sql.NullInt64
	if err := replica.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", gtid, timeout.Seconds()).Scan(&r); err != nil {
		return false, err
	}
	return r.Valid && r.Int64 == 0, nil
}

func (*mariaEngine) isReplica(ctx context.Context, db *sql.DB) (bool, error) {
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return false, err
	}
	defer rows.Close()
	return rows.Next(), rows.Err()
}

func (*mariaEngine) retryable(ctx context.Context, err error) bool { return mysqlRetryable(ctx, err) }

// mysqlRetryable: connection failures of go-sql-driver/mysql and server
// shutdowns, for MariaDB and MySQL.
func mysqlRetryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		switch myErr.Number {
		case 1053, 1927, 1152: // server shutdown, connection killed, aborted connection
			return true
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

func (*mariaEngine) readOnlyRefusal(err error) bool { return mysqlReadOnlyRefusal(err) }

func mysqlReadOnlyRefusal(err error) bool {
	var myErr *mysql.MySQLError
	return errors.As(err, &myErr) && (myErr.Number == 1290 || myErr.Number == 1836) // --read-only, read-only mode
}

// readOnlyFunctions: MariaDB does not enforce READS SQL DATA, so no user
// function is known to be read-only without Config.ReadOnlyFunctions.
func (*mariaEngine) readOnlyFunctions(context.Context, *sql.DB) ([]string, error) { return nil, nil }

// gtidSeq returns the sequence number of domain in a MariaDB GTID list
// ("0-1-100,1-2-50"); a list without that domain is 0.
func gtidSeq(list string, domain uint32) (uint64, error) {
	l, err := position.ParseMariaDBGTIDList(list)
	if err != nil {
		return 0, fmt.Errorf("plugin: %w", err)
	}
	seq, _ := l.Seq(domain)
	return seq, nil
}
