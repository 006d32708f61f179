package plugin

import (
	"context"
	"database/sql"
	"strings"
	"time"
)

// replicationCheckInterval is how often the poller asks a MariaDB or MySQL
// replica whether its replication threads run.
const replicationCheckInterval = time.Second

// replicationStatus is what SHOW SLAVE STATUS (MariaDB) or SHOW REPLICA
// STATUS (MySQL) says of a replica's replication threads.
type replicationStatus struct {
	// running: the I/O (receiver) and SQL (applier) threads both run.
	running bool
	// problem says why not: the threads' states and their last errors.
	problem string
}

// replicationReporter is an engine whose replicas report the state of
// their replication threads.
type replicationReporter interface {
	replicationStatus(ctx context.Context, replica *sql.DB) (replicationStatus, error)
}

// replicationColumns names the columns of one server's status statement.
type replicationColumns struct {
	statement, io, sql string
}

var (
	mariadbReplication = replicationColumns{"SHOW SLAVE STATUS", "Slave_IO_Running", "Slave_SQL_Running"}
	mysqlReplication   = replicationColumns{"SHOW REPLICA STATUS", "Replica_IO_Running", "Replica_SQL_Running"}
)

// read runs the status statement and interprets its first row (a MariaDB
// replica of several sources has one row per source: the first is the
// default connection).
func (c replicationColumns) read(ctx context.Context, db *sql.DB) (replicationStatus, error) {
	rows, err := db.QueryContext(ctx, c.statement)
	if err != nil {
		return replicationStatus{}, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return replicationStatus{}, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return replicationStatus{}, err
		}
		return replicationStatus{problem: c.statement + " returns no row: replication is not configured"}, nil
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return replicationStatus{}, err
	}
	row := make(map[string]string, len(cols))
	for i, col := range cols {
		row[col] = vals[i].String
	}
	st := replicationStatus{running: row[c.io] == "Yes" && row[c.sql] == "Yes"}
	if !st.running {
		parts := []string{c.io + ": " + row[c.io], c.sql + ": " + row[c.sql]}
		for _, col := range []string{"Last_IO_Error", "Last_SQL_Error"} {
			if e := row[col]; e != "" {
				parts = append(parts, col+": "+e)
			}
		}
		st.problem = strings.Join(parts, "; ")
	}
	return st, nil
}

// checkReplication asks each replica for its replication status (every
// replicationCheckInterval, engines that report it only) and logs when a
// replica stops or resumes replicating. Routing does not depend on it: a
// replica that stopped applying keeps its position, so it still serves
// exactly the reads it has applied, and MaxLag retires it once it falls
// that far behind. The status is for operators (the log and
// freshread_replica_replicating).
func (p *Plugin) checkReplication(ctx context.Context, now time.Time) {
	rr, ok := p.engine.(replicationReporter)
	if !ok || now.Sub(p.replicationCheckedAt) < replicationCheckInterval {
		return
	}
	p.replicationCheckedAt = now
	for _, r := range p.replicas() {
		st, err := rr.replicationStatus(ctx, r.db)
		if err != nil {
			if privilegeDenied(err) {
				p.warnReplicaPrivilege(ctx, r, err)
			}
			continue // the replica did not answer: the position poll marks it down
		}
		was := r.replicating.Swap(replicatingState(st.running))
		switch {
		case !st.running && was != replicatingNo:
			p.cfg.Logger.WarnContext(ctx, "freshread: replica is not replicating; it serves only reads it has already applied",
				"replica", r.name, "status", st.problem)
		case st.running && was == replicatingNo:
			p.cfg.Logger.InfoContext(ctx, "freshread: replica is replicating again", "replica", r.name)
		}
	}
}

// Values of replica.replicating.
const (
	replicatingUnknown int32 = iota // not checked yet, or the engine does not say
	replicatingNo
	replicatingYes
)

func replicatingState(running bool) int32 {
	if running {
		return replicatingYes
	}
	return replicatingNo
}
