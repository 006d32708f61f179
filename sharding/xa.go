package sharding

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/freshread/freshread/internal/engines"
)

// A write over several MariaDB shards outside any transaction (and the
// transaction CreateInBatches opens for itself over several shards)
// commits with XA, MariaDB's two-phase commit, when the coordinator (the
// first shard the write reached) keeps decisions (xaAllowed):
//
//  1. The first shard's transaction is an ordinary one: the coordinator.
//     Every other shard's part runs as an XA transaction (XA START) on a
//     connection of its own, under an XID that names the write (a random
//     global ID), its coordinator shard, and the part's database.
//  2. At commit, the coordinator's transaction inserts the write's row
//     into its decision table (freshread_xa_decisions), before any part is
//     prepared.
//  3. Every part is prepared (XA END, XA PREPARE). A prepare that fails
//     rolls everything back: nothing was written.
//  4. The coordinator's transaction commits. That commit is the decision:
//     the decision row exists, committed, exactly when it committed.
//  5. Each part is committed (XA COMMIT) on its connection, through the
//     shard's callbacks, so the shard's freshread plugin publishes what it
//     wrote once it is visible; then the decision row is deleted.
//
// A process that dies or loses a shard between 3 and 5 leaves prepared
// parts; MariaDB keeps them past the connection's end (10.5 and later).
// Recovery (recoverXA, xa_recovery.go) finds them with XA RECOVER and asks the
// coordinator's decision table: a committed row commits the part. With no
// row, it inserts one saying "aborted" under a lock wait of one second:
// the insert waits for the coordinator's transaction while that holds its
// own uncommitted row (the part may still commit: left for later), fails
// as a duplicate once it committed (commit the part), and succeeds only
// when that transaction ended without committing, which it then never
// can (roll the part back). See docs/design/sharding-and-moves.md,
// "Writes over several shards".

// xaDecisions is the coordinator's table of decisions: a row per write
// being committed ("c", with the names of the shards of its parts as a
// JSON array) or found aborted by recovery ("a").
const (
	xaDecisions    = "freshread_xa_decisions"
	xaDecisionsDDL = "CREATE TABLE IF NOT EXISTS " + xaDecisions + " (gtrid VARBINARY(64) NOT NULL PRIMARY KEY, outcome CHAR(1) NOT NULL, parts TEXT NULL, made TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"
)

// xaPart is the part of a write on one shard that runs as an XA
// transaction.
type xaPart struct {
	sh       *shard
	conn     *sql.Conn
	xid      string // the XID as SQL: X'gtrid',X'bqual'
	prepared bool
}

// xaShard is what XA knows of one shard (cached answers).
type xaShard struct {
	capable   bool   // MariaDB 10.5 or later
	schema    string // the shard's database (the XIDs' branch qualifier)
	decisions bool   // its decision table exists (it can coordinate)
}

// xaInfo returns what XA knows of sh, asking its primary once (a failure
// to ask is not cached and answers "not capable").
func (s *Sharding) xaInfo(ctx context.Context, sh *shard) xaShard {
	tp := &s.tp
	tp.mu.Lock()
	info, known := tp.xa[sh.index]
	tp.mu.Unlock()
	if known {
		return info
	}
	if dialect(sh) != "mysql" || sh.db.DryRun {
		info = xaShard{}
	} else {
		var version, schema sql.NullString
		if err := sh.primaryRow(ctx, "SELECT VERSION(), DATABASE()").Scan(&version, &schema); err != nil {
			return xaShard{}
		}
		info.schema = schema.String
		info.capable = xaVersionOK(version.String) && schema.Valid && len(schema.String) <= 64
	}
	tp.mu.Lock()
	tp.xa[sh.index] = info
	tp.mu.Unlock()
	return info
}

// xaVersionOK reports whether a VERSION() is MariaDB 10.5 or later, whose
// prepared XA transactions outlive their connection (MDEV-742).
func xaVersionOK(v string) bool {
	if !strings.Contains(v, "MariaDB") {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 10 || (major == 10 && minor >= 5)
}

// xaAllowed reports whether a part on sh of a write coordinated by coord
// can run as an XA transaction: both are MariaDB 10.5 or later, the
// coordinator's name fits the XID, and the coordinator has its decision
// table (created on first use). A shard that cannot is named in a warning
// once.
func (s *Sharding) xaAllowed(ctx context.Context, coord, sh *shard) bool {
	c, p := s.xaInfo(ctx, coord), s.xaInfo(ctx, sh)
	ok := c.capable && p.capable && len(coord.name) <= 64-len(xaGlobalPrefix)-xaRandomLen-1
	if ok && !c.decisions {
		if _, err := coord.primaryExec(ctx, xaDecisionsDDL); err != nil {
			s.warnOnce(coord, "sharding: cannot create the table of decisions of writes over several shards on the shard; such writes it coordinates cannot commit atomically, and are refused (ErrNoAtomicCommit) unless Config.SequentialCommits commits them shard by shard; grant CREATE on the shard's database, or create the table as docs/guide/sharding.md shows", err)
			return false
		}
		s.tp.mu.Lock()
		c.decisions = true
		s.tp.xa[coord.index] = c
		s.tp.mu.Unlock()
	}
	if !ok && dialect(sh) == "mysql" && !sh.db.DryRun {
		s.warnOnce(sh, "sharding: shard is not MariaDB 10.5 or later (or its name is longer than 37 bytes): a write over several shards it takes part in cannot commit atomically, and is refused (ErrNoAtomicCommit) unless Config.SequentialCommits commits it shard by shard", nil)
	}
	return ok
}

// warnOnce logs msg about sh once per shard.
func (s *Sharding) warnOnce(sh *shard, msg string, err error) {
	tp := &s.tp
	tp.mu.Lock()
	warned := tp.warned[sh.index]
	tp.warned[sh.index] = true
	tp.mu.Unlock()
	if warned {
		return
	}
	if err != nil {
		s.logger().Warn(msg, "shard", sh.name, "err", err)
		return
	}
	s.logger().Warn(msg, "shard", sh.name)
}

// The global transaction ID of an XID: xaGlobalPrefix, xaRandomLen hex
// digits, ':' and the coordinator shard's name (at most 64 bytes).
const (
	xaGlobalPrefix = "freshread:"
	xaRandomLen    = 16
)

// newGTRID returns a fresh global transaction ID for a write coordinated
// by coord.
func newGTRID(coord string) string {
	var r [xaRandomLen / 2]byte
	_, _ = rand.Read(r[:])
	return xaGlobalPrefix + hex.EncodeToString(r[:]) + ":" + coord
}

// parseGTRID returns the coordinator shard of a global transaction ID the
// plugin made.
func parseGTRID(g string) (coord string, ok bool) {
	rest, found := strings.CutPrefix(g, xaGlobalPrefix)
	if !found || len(rest) < xaRandomLen+1 || rest[xaRandomLen] != ':' {
		return "", false
	}
	if _, err := hex.DecodeString(rest[:xaRandomLen]); err != nil {
		return "", false
	}
	return rest[xaRandomLen+1:], true
}

// xidSQL is the XID of gtrid's branch in the database schema, as SQL (hex
// literals: any bytes are safe).
func xidSQL(gtrid, schema string) string {
	return "X'" + hex.EncodeToString([]byte(gtrid)) + "',X'" + hex.EncodeToString([]byte(schema)) + "'"
}

// beginXA begins the transaction's part on sh as an XA transaction on a
// connection of its own; t.mu is held.
func (t *lazyTx) beginXA(sh *shard) (*xaPart, error) {
	if t.gtrid == "" {
		t.gtrid = newGTRID(t.s.shards[t.shards[0]].name)
	}
	db, err := sh.sqlDB()
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(t.ctx)
	if err != nil {
		return nil, err
	}
	part := &xaPart{sh: sh, conn: conn, xid: xidSQL(t.gtrid, t.s.xaInfo(t.ctx, sh).schema)}
	if err := part.exec(t.ctx, "XA START "+part.xid); err != nil {
		part.discard()
		return nil, err
	}
	return part, nil
}

// exec runs query on the part's connection through the shard's callbacks,
// as a statement of a connection pinned with db.Connection: the shard's
// freshread plugin follows the XA transaction (XA START opens it, XA
// COMMIT publishes what it wrote).
func (x *xaPart) exec(ctx context.Context, query string) error {
	tx := x.sh.db.WithContext(ctx)
	tx.Statement.ConnPool = x.conn
	return tx.Exec(query).Error
}

// prepare ends and prepares the part.
func (x *xaPart) prepare(ctx context.Context) error {
	if err := x.exec(ctx, "XA END "+x.xid); err != nil {
		return err
	}
	if err := x.exec(ctx, "XA PREPARE "+x.xid); err != nil {
		return err
	}
	x.prepared = true
	return nil
}

// rollback rolls the part back on its connection and returns it to the
// pool; a part it cannot roll back is left to the server (an active one
// ends with its connection) or to recovery (a prepared one), and its
// connection is closed.
func (x *xaPart) rollback(ctx context.Context) error {
	var err error
	if !x.prepared {
		err = x.exec(ctx, "XA END "+x.xid)
		if n, _ := engines.MySQLErrorNumber(err); n == 1399 { // XAER_RMFAIL: already ended (IDLE)
			err = nil
		}
	}
	if err == nil {
		err = x.exec(ctx, "XA ROLLBACK "+x.xid)
	}
	if err != nil {
		x.discard()
		return err
	}
	return x.conn.Close()
}

// commit commits the prepared part on its connection (the shard's plugin
// publishes it) and returns the connection to the pool; a part it cannot
// commit is detached (its connection closed) for recovery to commit.
func (x *xaPart) commit(ctx context.Context) error {
	if err := x.exec(ctx, "XA COMMIT "+x.xid); err != nil {
		x.discard()
		return err
	}
	return x.conn.Close()
}

// discard closes the part's connection instead of returning it to the
// pool: the server rolls back a part not prepared yet, and keeps a
// prepared one for whoever resolves it (it can only be resolved from
// another connection once its own is gone).
func (x *xaPart) discard() {
	_ = x.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = x.conn.Close()
}

// endXA commits the transaction's parts on several MariaDB shards with
// XA; t.mu is held.
func (t *lazyTx) endXA() error {
	s := t.s
	tp := &s.tp
	ctx := context.WithoutCancel(t.ctx)
	coordConn := t.inner[0]
	coord := s.shards[t.shards[0]]

	rollbackAll := func(cause error) error {
		errs := []error{cause}
		if err := endTx(coordConn, false); err != nil {
			errs = append(errs, fmt.Errorf("sharding: roll back shard %q: %w", coord.name, err))
		}
		for i, x := range t.xa {
			switch {
			case x != nil:
				if err := x.rollback(ctx); err != nil && x.prepared {
					errs = append(errs, fmt.Errorf("sharding: roll back the prepared part on shard %q (recovery rolls it back): %w", x.sh.name, err))
					s.startRecovery()
				}
			case i > 0:
				_ = endTx(t.inner[i], false)
			}
		}
		return fmt.Errorf("%w: %w", errNotCommitted, errors.Join(errs...))
	}

	var names []string
	for _, x := range t.xa {
		if x != nil {
			names = append(names, x.sh.name)
		}
	}
	parts, _ := json.Marshal(names)
	if _, err := coordConn.ExecContext(ctx, "INSERT INTO "+xaDecisions+" (gtrid, outcome, parts) VALUES (?, 'c', ?)", t.gtrid, string(parts)); err != nil {
		return rollbackAll(fmt.Errorf("sharding: record the decision on shard %q: %w", coord.name, err))
	}
	for _, x := range t.xa {
		if x == nil {
			continue
		}
		err := tp.step("prepare " + x.sh.name)
		if err == nil {
			err = x.prepare(ctx)
		}
		if err != nil {
			return rollbackAll(fmt.Errorf("sharding: prepare the part on shard %q: %w", x.sh.name, err))
		}
	}

	if refused, err := tp.commitDecision(coord, coordConn); err != nil {
		if refused {
			return rollbackAll(err)
		}
		// Unknown: the parts are detached, for recovery to resolve by the
		// decision row once the coordinator's transaction is over.
		for _, x := range t.xa {
			if x != nil {
				x.discard()
			}
		}
		s.startRecovery()
		return fmt.Errorf("%w; its outcome is unknown: the prepared parts on the other shards follow it once it is known (recovery)", err)
	}
	t.committed = append(t.committed[:0], t.shards...)

	// Parts on shards that could not take part in XA (another engine)
	// commit after the decision, one after the other.
	var pending, partial []error
	for i, x := range t.xa {
		if x == nil && i > 0 {
			if err := endTx(t.inner[i], true); err != nil {
				partial = append(partial, fmt.Errorf("sharding: commit on shard %q failed after the others committed (it takes no part in XA: not atomic across shards): %w", s.shards[t.shards[i]].name, err))
			}
		}
	}
	for _, x := range t.xa {
		if x == nil {
			continue
		}
		err := tp.step("commit prepared " + x.sh.name)
		if err == nil {
			err = x.commit(ctx)
		} else {
			x.discard()
		}
		if err != nil {
			pending = append(pending, fmt.Errorf("shard %q: %w", x.sh.name, err))
		}
	}
	if len(pending) > 0 {
		s.startRecovery()
		return errors.Join(append(partial, fmt.Errorf("%w (committed in the background, retried until it succeeds): %w", ErrCommitPending, errors.Join(pending...)))...)
	}
	// Every part committed: the decision is no longer needed.
	s.forgetDecision(coord, t.gtrid)
	return errors.Join(partial...)
}

// rollbackXA rolls back the transaction's XA parts (Rollback, or a
// failure before the commit); t.mu is held.
func (t *lazyTx) rollbackXA() error {
	var errs []error
	for _, x := range t.xa {
		if x != nil {
			if err := x.rollback(context.WithoutCancel(t.ctx)); err != nil {
				errs = append(errs, fmt.Errorf("sharding: roll back the part on shard %q: %w", x.sh.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// primaryExec runs a statement of the plugin's own on the shard's primary
// pool directly (no callbacks, no routing).
func (sh *shard) primaryExec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	db, err := sh.sqlDB()
	if err != nil {
		return nil, err
	}
	return db.ExecContext(ctx, query, args...)
}
