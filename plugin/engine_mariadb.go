package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/position"
)

// mariaEngine: MariaDB GTIDs. A position holds the sequence number of
// every GTID domain: domain 0 in the main lane, domain d in the lane named
// d (mariadbPosition). With gtid_strict_mode the sequence numbers of one
// domain only grow, and a replica applies a domain's transactions in
// order, so "has applied" is a comparison per domain (see docs/design/mariadb.md).
type mariaEngine struct {
	mysqlFamily
	domain   uint32 // the primary's @@gtid_domain_id, for the cluster identity
	serverID uint32 // the primary's @@server_id, for MASTER_GTID_WAIT
}

func (m *mariaEngine) identify(ctx context.Context, primary *sql.DB) (uint64, error) {
	if err := primary.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_domain_id, @@GLOBAL.server_id").Scan(&m.domain, &m.serverID); err != nil {
		return 0, fmt.Errorf("plugin: read gtid_domain_id: %w", err)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "mariadb-domain-%d", m.domain)
	return h.Sum64(), nil
}

// gtidPosition reads a GTID list variable (gtid_binlog_pos on the primary,
// gtid_slave_pos on a replica) as a position.
func (m *mariaEngine) gtidPosition(ctx context.Context, db *sql.DB, variable string) (lsnstore.Position, error) {
	var s string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL."+variable).Scan(&s); err != nil {
		return lsnstore.Position{}, err
	}
	return parseGTIDPosition(variable, s)
}

// parseGTIDPosition parses the value s of a GTID list variable.
func parseGTIDPosition(variable, s string) (lsnstore.Position, error) {
	l, err := position.ParseMariaDBGTIDList(s)
	if err != nil {
		return lsnstore.Position{}, fmt.Errorf("plugin: %s: %w", variable, err)
	}
	return mariadbPosition(l), nil
}

// mariadbPosition maps a GTID list to a position: domain 0's sequence
// number in the main lane (no allocation for the common single-domain
// server), domain d's in the lane named d. Server IDs are not kept: under
// gtid_strict_mode order within a domain does not depend on them.
func mariadbPosition(l position.MariaDBGTIDList) lsnstore.Position {
	domains := l.Domains()
	var (
		main  lsnstore.LSN
		lanes []lsnstore.Lane
	)
	for _, d := range domains {
		seq, _ := l.Seq(d)
		if d == 0 {
			main = lsnstore.LSN(seq)
			continue
		}
		lanes = append(lanes, lsnstore.Lane{Name: strconv.FormatUint(uint64(d), 10), Value: lsnstore.LSN(seq)})
	}
	p, _ := lsnstore.NewPosition(main, lanes...) // decimal names are valid
	return p
}

// mariadbGTIDList is the inverse of mariadbPosition, with serverID in
// every GTID (MASTER_GTID_WAIT ignores it when comparing within a domain).
// A lane whose name is not a domain number is an error.
func mariadbGTIDList(p lsnstore.Position, serverID uint32) (string, error) {
	var b []byte
	if p.Main() > 0 {
		b = fmt.Appendf(b, "0-%d-%d", serverID, uint64(p.Main()))
	}
	for _, l := range p.Lanes() {
		d, err := strconv.ParseUint(l.Name, 10, 32)
		if err != nil {
			return "", fmt.Errorf("plugin: position lane %q is not a MariaDB GTID domain", l.Name)
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d-%d-%d", d, serverID, uint64(l.Value))
	}
	return string(b), nil
}

func (m *mariaEngine) primaryPositions(ctx context.Context, primary *sql.DB) (lsnstore.Position, lsnstore.Position, error) {
	pos, err := m.gtidPosition(ctx, primary, "gtid_binlog_pos")
	return pos, pos, err
}

// writePosition reads @@gtid_binlog_pos after COMMIT returned: in the
// transaction's domain it is at or past the transaction's GTID. It holds
// every other domain's latest GTID too, so a read after the write also
// waits for those: conservative.
func (m *mariaEngine) writePosition(ctx context.Context, primary *sql.DB) (lsnstore.Position, error) {
	return m.gtidPosition(ctx, primary, "gtid_binlog_pos")
}

// replayPosition reads @@gtid_slave_pos and, in the same query, the
// server's identity (endpoint.go), which must be the one verified.
func (m *mariaEngine) replayPosition(ctx context.Context, replica *sql.DB) (lsnstore.Position, error) {
	var s, id string
	if err := replica.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_slave_pos, "+mariadbIdentity).Scan(&s, &id); err != nil {
		return lsnstore.Position{}, err
	}
	if err := checkEndpoint(ctx, replica, id); err != nil {
		return lsnstore.Position{}, err
	}
	return parseGTIDPosition("gtid_slave_pos", s)
}

// waitApplied runs MASTER_GTID_WAIT on the replica (MaxScale's causal
// reads) with the GTID list of pos: it returns 0 once the replica has
// applied, in every domain of the list, the GTID of that sequence number,
// -1 on timeout.
func (m *mariaEngine) waitApplied(ctx context.Context, replica *sql.DB, pos lsnstore.Position, timeout time.Duration) (bool, error) {
	gtids, err := mariadbGTIDList(pos, m.serverID)
	if err != nil || gtids == "" {
		return gtids == "", err
	}
	var r sql.NullInt64
	if err := replica.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", gtids, timeout.Seconds()).Scan(&r); err != nil {
		return false, err
	}
	return r.Valid && r.Int64 == 0, nil
}
