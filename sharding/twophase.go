package sharding

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/lib/faults"
	"github.com/freshread/freshread/internal/lib/sqlerr"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding/merge"
)

// A write over several PostgreSQL shards outside any transaction (and the
// transaction CreateInBatches opens for itself over several shards)
// commits with two-phase commit when every shard it reached allows
// prepared transactions (max_prepared_transactions > 0):
//
//  1. The first shard the write reached is the coordinator. Its
//     transaction's ID is read (txid_current()).
//  2. Every other shard's transaction is prepared (PREPARE TRANSACTION)
//     under a global ID that names the coordinator shard and that
//     transaction ID. A prepare that fails rolls everything back: nothing
//     was written.
//  3. The coordinator's transaction commits. That commit is the decision:
//     the coordinator's database records the outcome of every transaction
//     ID (txid_status), so whoever later finds a prepared part can tell
//     whether to commit or roll it back, with no table of its own and no
//     clock.
//  4. Each prepared part is committed (COMMIT PREPARED) through the shard's
//     own connection pool, so the shard's freshread plugin publishes it (a
//     commit of unnamed tables: the database-wide position).
//
// A process that dies or loses a shard between 2 and 4 leaves prepared
// parts. They are resolved by recovery (recoverPrepared), which runs when
// the plugin is installed and, in a process that left a part unresolved,
// until it is resolved: a part whose coordinator transaction committed is
// committed, one whose coordinator transaction aborted is rolled back, one
// still in progress is left to its coordinator. See
// docs/design/sharding-and-moves.md, "Writes over several shards".
//
// Shards on MariaDB commit with XA (xa.go). A write over shards on MySQL,
// or PostgreSQL shards without prepared transactions, is refused
// (ErrNoAtomicCommit), or with Config.SequentialCommits committed one
// shard after the other (tx.go): a failure between the commits then
// leaves part of the write.

// gidPrefix starts the global ID of every part the plugin prepares.
const gidPrefix = "freshread:"

// errNotCommitted marks the error of a two-phase commit that rolled every
// part back: nothing of the write was committed (definitelyFailed).
var errNotCommitted = errors.New("sharding: nothing committed")

// twoPhase holds what two-phase commit knows of the shards.
type twoPhase struct {
	mu      sync.Mutex
	allowed map[int]bool // shard index -> prepared transactions allowed (cached answers)
	xa      map[int]xaShard
	warned  map[int]bool

	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// recovering: a recovery loop runs (started by a part left unresolved).
	recovering bool
	// forget: MariaDB decision rows to delete, by coordinator; forgetting:
	// deleteDecisions runs (xa.go).
	forget     map[*shard][]string
	forgetting bool
}

func (tp *twoPhase) init() {
	tp.ctx, tp.cancel = context.WithCancel(context.Background())
	tp.allowed = map[int]bool{}
	tp.xa = map[int]xaShard{}
	tp.warned = map[int]bool{}
}

// step is where a test makes a step of a two-phase commit fail
// (faults.At): "prepare <shard>", "commit <coordinator shard>", "commit
// prepared <shard>", a round of the recovery loop ("recovery round") and
// the pass at install ("recovery at start").
func (tp *twoPhase) step(name string) error { return faults.At("sharding: " + name) }

// preparable reports whether sh can hold prepared parts: a PostgreSQL
// shard that runs statements (not a dry run).
func preparable(sh *shard) bool { return dialect(sh) == "postgres" && !sh.db.DryRun }

// twoPhaseAllowed reports whether every shard of idx allows prepared
// transactions. The answer is asked once per shard (a failure to ask is
// not cached) and a shard that does not is named in a warning once.
func (s *Sharding) twoPhaseAllowed(ctx context.Context, idx []int) bool {
	tp := &s.tp
	for _, i := range idx {
		sh := s.shards[i]
		if !preparable(sh) {
			return false
		}
		tp.mu.Lock()
		ok, known := tp.allowed[i]
		tp.mu.Unlock()
		if !known {
			var n int
			if err := sh.primaryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&n); err != nil {
				return false
			}
			ok = n > 0
			tp.mu.Lock()
			tp.allowed[i] = ok
			warn := !ok && !tp.warned[i]
			tp.warned[i] = true
			tp.mu.Unlock()
			if warn {
				s.logger().Warn("sharding: shard has max_prepared_transactions = 0: a write over several shards it takes part in cannot commit atomically, and is refused (ErrNoAtomicCommit) unless Config.SequentialCommits commits it shard by shard; set max_prepared_transactions (for example to max_connections) on the shard and its replicas", "shard", sh.name)
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func (s *Sharding) logger() *slog.Logger {
	if s.cfg.Logger != nil {
		return s.cfg.Logger
	}
	return slog.Default()
}

// gid is the global ID of the part of shard part of the write whose
// coordinator transaction xid runs on shard coord.
func gid(coord string, xid int64, part string) string {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return gidPrefix + hex.EncodeToString([]byte(coord)) + ":" + strconv.FormatInt(xid, 10) + ":" + hex.EncodeToString([]byte(part)) + ":" + hex.EncodeToString(r[:])
}

// parseGID returns the coordinator shard and transaction ID of a global
// ID the plugin made.
func parseGID(g string) (coord string, xid int64, ok bool) {
	rest, found := strings.CutPrefix(g, gidPrefix)
	if !found {
		return "", 0, false
	}
	f := strings.Split(rest, ":")
	if len(f) != 4 {
		return "", 0, false
	}
	c, err := hex.DecodeString(f[0])
	if err != nil {
		return "", 0, false
	}
	x, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return string(c), x, true
}

// quoteLiteral quotes a global ID for PREPARE TRANSACTION and COMMIT/
// ROLLBACK PREPARED, which take no parameters. The IDs are the plugin's
// own (hex and digits), and recovery only handles IDs parseGID accepts.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// endTwoPhase commits the transaction's parts on several PostgreSQL
// shards with two-phase commit; t.mu is held.
func (t *lazyTx) endTwoPhase() error {
	s := t.s
	tp := &s.tp
	ctx := context.WithoutCancel(t.ctx)
	coordConn := t.inner[0]
	coord := s.shards[t.shards[0]]

	rollbackAll := func(prepared []string, partsFrom int, cause error) error {
		errs := []error{cause}
		if err := endTx(coordConn, false); err != nil {
			errs = append(errs, fmt.Errorf("sharding: roll back shard %q: %w", coord.name, err))
		}
		for i := partsFrom; i < len(t.inner); i++ {
			_ = endTx(t.inner[i], false)
		}
		for i, g := range prepared {
			sh := s.shards[t.shards[i+1]]
			if err := sh.db.WithContext(ctx).Exec("ROLLBACK PREPARED " + quoteLiteral(g)).Error; err != nil {
				errs = append(errs, fmt.Errorf("sharding: roll back the prepared part on shard %q (recovery rolls it back): %w", sh.name, err))
				s.startRecovery()
			}
		}
		return fmt.Errorf("%w: %w", errNotCommitted, errors.Join(errs...))
	}

	var xid int64
	if err := coordConn.QueryRowContext(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		return rollbackAll(nil, 1, fmt.Errorf("sharding: read the transaction ID on shard %q: %w", coord.name, err))
	}
	var prepared []string
	for i := 1; i < len(t.inner); i++ {
		sh := s.shards[t.shards[i]]
		g := gid(coord.name, xid, sh.name)
		err := tp.step("prepare " + sh.name)
		if err == nil {
			_, err = t.inner[i].ExecContext(ctx, "PREPARE TRANSACTION "+quoteLiteral(g))
		}
		if err != nil {
			return rollbackAll(prepared, i, fmt.Errorf("sharding: prepare the part on shard %q: %w", sh.name, err))
		}
		prepared = append(prepared, g)
		// The session is out of its transaction: COMMIT ends the freshread
		// plugin's transaction (it publishes what the part wrote, at a
		// position before the part is visible: harmless, the COMMIT
		// PREPARED below raises it again).
		if err := endTx(t.inner[i], true); err != nil {
			// The session's wrapper is ended too (a ROLLBACK outside a
			// transaction changes nothing): the part is rolled back by
			// ROLLBACK PREPARED.
			return rollbackAll(prepared, i, fmt.Errorf("sharding: end the prepared part's session on shard %q: %w", sh.name, err))
		}
	}

	if refused, err := tp.commitDecision(coord, coordConn); err != nil {
		if refused {
			return rollbackAll(prepared, len(t.inner), err)
		}
		s.startRecovery()
		return fmt.Errorf("%w; its outcome is unknown: the prepared parts on the other shards follow it once it is known (recovery)", err)
	}
	t.committed = append(t.committed[:0], t.shards...)

	var pending []error
	for i, g := range prepared {
		sh := s.shards[t.shards[i+1]]
		err := tp.step("commit prepared " + sh.name)
		if err == nil {
			err = commitPrepared(ctx, sh, g, true)
		}
		if err != nil {
			pending = append(pending, fmt.Errorf("shard %q: %w", sh.name, err))
		}
	}
	if len(pending) > 0 {
		s.startRecovery()
		return fmt.Errorf("%w (committed in the background, retried until it succeeds): %w", ErrCommitPending, errors.Join(pending...))
	}
	return nil
}

// commitDecision commits the coordinator's transaction, the decision of
// a write over several shards. refused: it did not commit (the server
// refused the COMMIT, or the writer lease's fence never sent it);
// otherwise an error is a COMMIT of unknown outcome. Either way the
// transaction is rolled back after an error, which makes its outcome
// "aborted" for recovery unless the COMMIT did commit.
func (tp *twoPhase) commitDecision(coord *shard, conn gorm.ConnPool) (refused bool, err error) {
	err = tp.step("commit " + coord.name)
	if err == nil {
		err = endTx(conn, true)
	}
	if err == nil {
		return false, nil
	}
	_ = endTx(conn, false)
	refused = definitelyFailed(err) || plugin.IsStoreUnreachable(err)
	return refused, fmt.Errorf("sharding: commit on shard %q (the decision of a write over several shards): %w", coord.name, err)
}

// commitPrepared commits the prepared part g on sh through the shard's
// pool (its freshread plugin publishes the commit). A part that no longer
// exists was committed by recovery: only a committed coordinator makes it
// commit, and only an aborted one makes it roll back. A part another
// session is committing at that moment (the writer and a recovery, in this
// process or another, racing: SQLSTATE 55000, "is busy") is waited for
// until it is gone, for up to busyWait, when wait is set (the writer);
// otherwise (recovery) errPartBusy is returned: the part's other
// committer finishes it.
func commitPrepared(ctx context.Context, sh *shard, g string, wait bool) error {
	deadline := time.Now().Add(busyWait)
	for {
		err := sh.db.WithContext(ctx).Exec("COMMIT PREPARED " + quoteLiteral(g)).Error
		switch sqlerr.PostgresCode(err) {
		case "42704": // undefined_object: no such prepared transaction
			return nil
		case "55000": // object_in_use: another session is committing it
			if !wait {
				return errPartBusy
			}
			if time.Now().Before(deadline) && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		return err
	}
}

// errPartBusy: another session is committing the prepared part.
var errPartBusy = errors.New("sharding: another session is committing the prepared part")

// busyWait bounds commitPrepared's wait for a part another session is
// committing.
const busyWait = 5 * time.Second

// primaryRow runs query on the shard's primary pool directly: prepared
// parts and transaction outcomes are the primary's (a replica may not
// have replayed them), and these reads are the plugin's own, not the
// application's statements (no callbacks, no routing).
func (sh *shard) primaryRow(ctx context.Context, query string, args ...any) *sql.Row {
	db, err := sh.sqlDB()
	if err != nil {
		return merge.ErrRow(ctx, err)
	}
	return db.QueryRowContext(ctx, query, args...)
}

// recoverAtStart resolves, once and in the background, the parts that
// processes before this one left prepared; a failure is logged (the parts
// wait for the next process that starts, or for RecoverPrepared).
func (s *Sharding) recoverAtStart() {
	tp := &s.tp
	any := false
	for _, sh := range s.shards {
		any = any || preparable(sh) || (dialect(sh) == "mysql" && !sh.db.DryRun)
	}
	if !any {
		return
	}
	tp.wg.Add(1)
	go func() {
		defer tp.wg.Done()
		if tp.step("recovery at start") != nil {
			return // a test: this process died before its first pass
		}
		ctx, cancel := context.WithTimeout(tp.ctx, time.Minute)
		defer cancel()
		left, err := s.RecoverPrepared(ctx)
		if err != nil && tp.ctx.Err() == nil {
			s.logger().Warn("sharding: recovery of prepared parts of writes over several shards left by earlier processes failed; they hold their rows' locks until Sharding.RecoverPrepared succeeds", "left", left, "err", err)
		}
	}()
}

// recoveryRetry is the wait between recovery rounds while parts stay
// unresolved.
var recoveryRetry = 2 * time.Second

// startRecovery starts the recovery loop unless it runs: it resolves the
// prepared parts on every PostgreSQL shard, again every recoveryRetry
// while some stay unresolved, and ends when none is left (or at Close).
func (s *Sharding) startRecovery() {
	tp := &s.tp
	tp.mu.Lock()
	if tp.recovering || tp.ctx == nil || tp.ctx.Err() != nil {
		tp.mu.Unlock()
		return
	}
	tp.recovering = true
	tp.wg.Add(1)
	tp.mu.Unlock()
	go func() {
		defer tp.wg.Done()
		last := ""
		for {
			left, err := -1, tp.step("recovery round") // a test: this process died
			if err == nil {
				left, err = s.RecoverPrepared(tp.ctx)
			}
			if err == nil && left == 0 {
				break
			}
			if err != nil && err.Error() != last && tp.ctx.Err() == nil {
				last = err.Error()
				s.logger().Warn("sharding: recovery of prepared parts of writes over several shards failed; retrying", "left", left, "err", err)
			}
			t := time.NewTimer(recoveryRetry)
			select {
			case <-tp.ctx.Done():
				t.Stop()
				tp.mu.Lock()
				tp.recovering = false
				tp.mu.Unlock()
				return
			case <-t.C:
			}
		}
		tp.mu.Lock()
		tp.recovering = false
		tp.mu.Unlock()
	}()
}

// RecoverPrepared resolves the parts of writes over several shards that
// a process left prepared (it died, or lost a shard, between the two
// phases): each part whose coordinator transaction committed is
// committed, each whose coordinator transaction aborted is rolled back.
// It returns how many parts it left: those whose coordinator transaction
// is still in progress, or whose shard could not be asked. The plugin
// runs it when it is installed and whenever it left a part itself; call it
// from operations tooling to resolve parts at once.
func (s *Sharding) RecoverPrepared(ctx context.Context) (left int, _ error) {
	var errs []error
	// MariaDB: the decision rows are read before the parts are listed
	// (sweepXADecisions).
	decisions := map[*shard][]xaDecisionRow{}
	for _, sh := range s.shards {
		if !s.xaInfo(ctx, sh).capable {
			continue
		}
		rows, err := sh.xaDecisionRows(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("sharding: list decision rows on shard %q: %w", sh.name, err))
			continue
		}
		decisions[sh] = rows
	}
	prepared, listed := map[string]bool{}, true
	for _, sh := range s.shards {
		n, seen, err := s.recoverXA(ctx, sh)
		left += n
		if err != nil {
			errs = append(errs, err)
		}
		if seen == nil && s.xaInfo(ctx, sh).capable {
			listed = false
		}
		for g := range seen {
			prepared[g] = true
		}
	}
	if listed {
		if err := s.sweepXADecisions(ctx, decisions, prepared); err != nil {
			errs = append(errs, err)
		}
	}
	for _, sh := range s.shards {
		if !preparable(sh) {
			continue
		}
		gids, err := sh.preparedParts(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("sharding: list prepared parts on shard %q: %w", sh.name, err))
			left++
			continue
		}
		for _, g := range gids {
			done, err := s.resolvePart(ctx, sh, g)
			if err != nil {
				errs = append(errs, err)
			}
			if !done {
				left++
			}
		}
	}
	return left, errors.Join(errs...)
}

// preparedParts lists the global IDs of the plugin's prepared parts in
// the shard's database.
func (sh *shard) preparedParts(ctx context.Context) ([]string, error) {
	db, err := sh.sqlDB()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE $1", gidPrefix+"%")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gids []string
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return nil, err
		}
		gids = append(gids, g)
	}
	return gids, rows.Err()
}

// resolvePart commits or rolls back the prepared part g on sh by its
// coordinator transaction's outcome; done is false when that is not
// known yet.
func (s *Sharding) resolvePart(ctx context.Context, sh *shard, g string) (done bool, _ error) {
	coordName, xid, ok := parseGID(g)
	if !ok {
		return false, nil
	}
	coord := s.byName[coordName]
	if coord == nil {
		return false, fmt.Errorf("sharding: prepared part %s on shard %q names coordinator shard %q, which is not configured: resolve it by hand (COMMIT PREPARED or ROLLBACK PREPARED)", g, sh.name, coordName)
	}
	var status *string
	if err := coord.primaryRow(ctx, "SELECT txid_status($1)", xid).Scan(&status); err != nil {
		return false, fmt.Errorf("sharding: ask shard %q the outcome of transaction %d (prepared part %s on shard %q): %w", coord.name, xid, g, sh.name, err)
	}
	if status == nil {
		return false, fmt.Errorf("sharding: shard %q no longer knows the outcome of transaction %d: prepared part %s on shard %q must be resolved by hand", coord.name, xid, g, sh.name)
	}
	switch *status {
	case "committed":
		if err := commitPrepared(ctx, sh, g, false); err != nil {
			if errors.Is(err, errPartBusy) {
				return false, nil // its other committer finishes it: the next round sees it gone
			}
			return false, fmt.Errorf("sharding: commit prepared part %s on shard %q: %w", g, sh.name, err)
		}
		s.logger().Info("sharding: recovery committed a prepared part of a write over several shards", "shard", sh.name, "gid", g)
		return true, nil
	case "aborted":
		err := sh.db.WithContext(ctx).Exec("ROLLBACK PREPARED " + quoteLiteral(g)).Error
		if sqlerr.PostgresCode(err) == "55000" {
			return false, nil // another session is resolving it: the next round sees it gone
		}
		if err != nil && sqlerr.PostgresCode(err) != "42704" {
			return false, fmt.Errorf("sharding: roll back prepared part %s on shard %q: %w", g, sh.name, err)
		}
		s.logger().Info("sharding: recovery rolled back a prepared part of a write over several shards", "shard", sh.name, "gid", g)
		return true, nil
	}
	return false, nil // in progress: its coordinator decides
}

// stopTwoPhase stops recovery (Close).
func (s *Sharding) stopTwoPhase() {
	tp := &s.tp
	tp.mu.Lock()
	cancel := tp.cancel
	tp.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	tp.wg.Wait()
}
