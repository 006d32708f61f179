package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/freshread/freshread/sharding"
)

// SwitchReport is what a switch did and how long the moving buckets'
// writes were held.
type SwitchReport struct {
	// Moves are the IDs of the moves switched together.
	Moves []string
	// Version is the published map version.
	Version int64
	// Resumed: the map had been published by an earlier, interrupted
	// switch, which this one finished.
	Resumed bool
	// Hold is the write hold: from fencing the source(s) to unfencing the
	// target(s). Its parts: Drain (until the source transactions open at
	// the fence ended), Apply (the last Changes), Verify (0 when
	// skipped), Record (the targets' RecordWrite of the moved tables),
	// Publish, and Acks (until every client acknowledged the new map or
	// went silent).
	Hold, Drain, Apply, Verify, Record, Publish, Acks time.Duration
	// Changes is the number of decoded changes applied during the hold.
	Changes int64
	// Verified are the verifications made during the hold (none when
	// skipped).
	Verified []*VerifyReport
}

// Switch hands the buckets over to the target: see the package
// documentation. It needs a finished copy; run CatchUp first so the last
// changes are few (the switch catches up once more before it holds
// writes). A switch that fails before the map is published rolls itself
// back (the source unfenced, the move catching up again, resumable); once
// published it can only go forward, and running Switch again finishes it.
func (m *Mover) Switch(ctx context.Context) (*SwitchReport, error) {
	done, err := m.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return switchMoves(ctx, m.cfg, []*Mover{m})
}

// The switch catches up before it fences, at most preSwitchRounds rounds,
// until a round finds fewer than preSwitchChanges changes.
const (
	preSwitchRounds  = 5
	preSwitchChanges = 100
)

// switchMoves switches movers together: one fence per source, one
// publish of a map with every move applied, one wait for the clients, one
// unfence per target. The movers are begun.
func switchMoves(ctx context.Context, cfg Config, movers []*Mover) (*SwitchReport, error) {
	rep := &SwitchReport{}
	switched := 0
	for _, m := range movers {
		rep.Moves = append(rep.Moves, m.mv.ID)
		st, err := m.readState(ctx)
		if err != nil {
			return rep, err
		}
		switch {
		case !st.exists:
			return rep, fmt.Errorf("%w: move %s is not prepared", ErrPhase, m.mv.ID)
		case st.phase == sharding.MoveSwitched || st.phase == sharding.MoveCleaning || st.phase == sharding.MoveDone:
			switched++
			rep.Version = max(rep.Version, st.version)
		case st.phase != sharding.MoveCatchingUp && st.phase != sharding.MoveSwitching:
			return rep, fmt.Errorf("%w: move %s is %q: the switch follows the copy", ErrPhase, m.mv.ID, st.phase)
		}
	}
	if switched == len(movers) {
		return rep, nil
	}
	if switched > 0 {
		return rep, fmt.Errorf("%w: some moves of the plan switched, others did not", ErrPhase)
	}
	bm, err := current(ctx, cfg)
	if err != nil {
		return rep, err
	}
	published := false
	for i, m := range movers {
		p, err := m.ownedBy(bm)
		if err != nil {
			return rep, err
		}
		if i > 0 && p != published {
			return rep, fmt.Errorf("%w: the map (version %d) publishes some moves of the plan and not others", ErrNotOwner, bm.Version)
		}
		published = p
	}
	var holdStart time.Time
	if published {
		// An earlier switch published and stopped: go forward. Its fences on
		// the sources are in place; setting them again costs nothing.
		rep.Resumed, rep.Version = true, bm.Version
		holdStart = time.Now()
		if _, err := fenceSources(ctx, cfg, movers); err != nil {
			return rep, err
		}
	} else {
		for _, m := range movers {
			if err := m.feed.resume(ctx); err != nil {
				return rep, err
			}
			if err := m.setPhase(ctx, m.dst.DB, sharding.MoveSwitching); err != nil {
				return rep, err
			}
			if err := m.report(ctx, sharding.MoveSwitching, sharding.NotCaughtUp); err != nil {
				return rep, err
			}
		}
		// The last catch-ups outside the hold: until a round over every move
		// finds few changes, so that the hold applies few.
		for i := 0; i < preSwitchRounds; i++ {
			var changes int64
			for _, m := range movers {
				r, err := m.feed.round(ctx)
				if err != nil {
					return rep, err
				}
				changes += r.changes
			}
			if changes < preSwitchChanges {
				break
			}
		}
		holdStart = time.Now()
		v, err := holdAndPublish(ctx, cfg, movers, bm, rep)
		if err != nil {
			return rep, err
		}
		rep.Version = v
	}
	for _, m := range movers {
		if err := m.eng.setVersion(ctx, m.dst.DB, cfg.Schema, m.mv.ID, rep.Version); err != nil {
			return rep, fmt.Errorf("reshard: move %s: record the published version: %w", m.mv.ID, err)
		}
	}
	if err := movers[0].at("switch:published"); err != nil {
		return rep, err
	}
	t := time.Now()
	if err := waitAcks(ctx, cfg, rep.Version); err != nil {
		return rep, err
	}
	rep.Acks = time.Since(t)
	for _, m := range movers {
		if err := m.eng.unfence(ctx, m.dst.DB, cfg.Schema, m.mv.Buckets, FenceIncoming, m.mv.ID); err != nil {
			return rep, fmt.Errorf("reshard: move %s: unfence %s: %w", m.mv.ID, m.dst.Name, err)
		}
	}
	rep.Hold = time.Since(holdStart)
	for _, m := range movers {
		if err := m.setPhase(ctx, m.dst.DB, sharding.MoveSwitched); err != nil {
			return rep, err
		}
		if err := m.report(ctx, sharding.MoveSwitched, sharding.NotCaughtUp); err != nil {
			return rep, err
		}
		// The feed is of no more use (the source refuses the moved buckets'
		// writes); Cleanup drops it too.
		if err := m.feed.drop(ctx); err != nil {
			cfg.Logger.WarnContext(ctx, "reshard: drop the feed after the switch", "move", m.mv.ID, "err", err)
		}
		cfg.Logger.InfoContext(ctx, "reshard: switched", "move", m.mv.ID, "version", rep.Version, "hold", rep.Hold, "drain", rep.Drain, "apply", rep.Apply, "verify", rep.Verify, "acks", rep.Acks)
	}
	return rep, nil
}

// holdAndPublish fences the sources, waits for their open transactions,
// applies the last changes, verifies and publishes; on failure it rolls
// back to catching up (unless the outcome of the publish is unknown).
func holdAndPublish(ctx context.Context, cfg Config, movers []*Mover, bm sharding.BucketMap, rep *SwitchReport) (int64, error) {
	hctx, cancel := context.WithTimeout(ctx, cfg.SwitchTimeout)
	defer cancel()
	v, err := func() (int64, error) {
		fencedAt, err := fenceSources(hctx, cfg, movers)
		if err != nil {
			return 0, err
		}
		if err := movers[0].at("switch:fenced"); err != nil {
			return 0, err
		}
		t := time.Now()
		for _, m := range movers {
			if err := m.eng.drain(hctx, cfg, m.src, fencedAt[m.src.Name]); err != nil {
				return 0, err
			}
		}
		rep.Drain = time.Since(t)
		t = time.Now()
		for _, m := range movers {
			n, err := m.feed.last(hctx)
			rep.Changes += n
			if err != nil {
				return 0, err
			}
		}
		rep.Apply = time.Since(t)
		if err := movers[0].at("switch:applied"); err != nil {
			return 0, err
		}
		if !cfg.SkipSwitchVerify {
			t = time.Now()
			for _, m := range movers {
				vr, err := m.verify(hctx)
				if err != nil {
					return 0, err
				}
				rep.Verified = append(rep.Verified, vr)
				if err := vr.err(); err != nil {
					return 0, err
				}
			}
			rep.Verify = time.Since(t)
		}
		t = time.Now()
		for _, m := range movers {
			if err := m.recordMoved(hctx); err != nil {
				return 0, err
			}
		}
		rep.Record = time.Since(t)
		if err := movers[0].at("switch:before-publish"); err != nil {
			return 0, err
		}
		next := sharding.BucketMap{Owners: slices.Clone(bm.Owners), HotUsers: bm.HotUsers}
		for _, m := range movers {
			for _, b := range m.mv.Buckets {
				next.Owners[b] = m.mv.To
			}
		}
		t = time.Now()
		v, err := cfg.Store.Publish(hctx, bm.Version, next)
		rep.Publish = time.Since(t)
		if err == nil {
			return v, nil
		}
		if errors.Is(err, sharding.ErrMapConflict) {
			return 0, fmt.Errorf("reshard: publish the map over version %d: %w", bm.Version, err)
		}
		// The outcome is unknown (the store may have committed): look.
		lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.SwitchTimeout)
		defer lcancel()
		now, lerr := current(lctx, cfg)
		if lerr == nil {
			if p, oerr := movers[0].ownedBy(now); oerr == nil && p {
				return now.Version, nil
			}
			return 0, fmt.Errorf("reshard: publish the map: %w", err)
		}
		return 0, &unknownPublish{fmt.Errorf("reshard: publish the map failed (%v) and reading it back failed (%v): the moves stay fenced; run Switch again", err, lerr)}
	}()
	if err == nil {
		return v, nil
	}
	var unknown *unknownPublish
	if errors.Is(err, errCrash) || errors.As(err, &unknown) {
		return 0, err
	}
	if hctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
		err = fmt.Errorf("%w: before the publish (%s): %v", ErrSwitchTimeout, cfg.SwitchTimeout, err)
	}
	// Roll back: the sources take writes again, the moves catch up again.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.SwitchTimeout)
	defer rcancel()
	var errs []error
	for _, m := range movers {
		if e := m.eng.unfence(rctx, m.src.DB, cfg.Schema, m.mv.Buckets, FenceMoved, m.mv.ID); e != nil {
			errs = append(errs, fmt.Errorf("unfence %s: %w", m.src.Name, e))
		}
	}
	for _, m := range movers {
		if e := m.setPhase(rctx, m.dst.DB, sharding.MoveCatchingUp); e != nil {
			errs = append(errs, e)
		}
		if e := m.report(rctx, sharding.MoveCatchingUp, sharding.NotCaughtUp); e != nil {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("%w; rolling the switch back failed too: %w", err, errors.Join(errs...))
	}
	return 0, fmt.Errorf("%w (the switch was rolled back; the move is catching up)", err)
}

type unknownPublish struct{ error }

func (u *unknownPublish) Unwrap() error { return u.error }

// recordMoved publishes, during the switch's hold (after the last apply,
// before the map is published), one write of every moved table on the
// target. Its position is the target primary's at that moment, past every
// copy chunk and catch-up batch, so once the map names the target no read
// of a moved row goes to a replica that has not replayed them all, even
// if an earlier recordWrite failed or a mover died between a commit and
// its record. A failure fails the switch (it rolls back to catching up):
// an earlier failure was seen by the mover's process only.
func (m *Mover) recordMoved(ctx context.Context) error {
	if m.dst.RecordWrite == nil {
		return nil
	}
	tables := make([]string, len(m.cfg.Tables))
	for i, t := range m.cfg.Tables {
		tables[i] = t.Name
	}
	if err := m.dst.RecordWrite(ctx, tables...); err != nil {
		return fmt.Errorf("reshard: move %s: publish the moved rows' position on %s: %w", m.mv.ID, m.dst.Name, err)
	}
	return nil
}

// fenceSources fences every move's buckets as moved on its source, one
// transaction per source, and returns, per source, a moment after the
// fence committed: a transaction that began later sees the fence.
func fenceSources(ctx context.Context, cfg Config, movers []*Mover) (map[string]time.Time, error) {
	bySource := map[string][]*Mover{}
	var order []string
	for _, m := range movers {
		if bySource[m.src.Name] == nil {
			order = append(order, m.src.Name)
		}
		bySource[m.src.Name] = append(bySource[m.src.Name], m)
	}
	at := map[string]time.Time{}
	for _, name := range order {
		ms := bySource[name]
		src, eng := ms[0].src, ms[0].eng
		err := eng.withTx(ctx, src.DB, func(tx *sql.Tx) error {
			for _, m := range ms {
				if err := eng.fence(ctx, tx, cfg.Schema, m.mv.Buckets, FenceMoved, m.mv.ID); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reshard: fence the moving buckets on %s: %w", name, err)
		}
		t, err := eng.now(ctx, src.DB)
		if err != nil {
			return nil, fmt.Errorf("reshard: fence on %s: %w", name, err)
		}
		at[name] = t
	}
	return at, nil
}

// drain waits until no transaction that began on the source at or before
// fencedAt is open. The guard alone is not enough: a statement (or a
// REPEATABLE READ transaction) whose snapshot was taken before the fence
// committed does not see it, and a write in it may commit after the
// fence. pg_stat_activity's xact_start finds them all, also those without
// an xid yet (which the xmin of txid_current_snapshot() misses; that
// xmin is also held back by other databases' transactions); prepared
// transactions are in pg_prepared_xacts.
func drain(ctx context.Context, cfg Config, src Shard, fencedAt time.Time) error {
	// Without the privilege, other roles' transactions show no xact_start,
	// and the drain would not wait for them.
	var seesAll bool
	if err := src.DB.QueryRowContext(ctx, `SELECT rolsuper OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') FROM pg_roles WHERE rolname = current_user`).Scan(&seesAll); err != nil {
		return fmt.Errorf("reshard: privileges on %s: %w", src.Name, err)
	}
	if !seesAll {
		return fmt.Errorf("%w: the mover's role on %s must be a superuser or a member of pg_read_all_stats, to see every transaction the switch waits for", ErrConfig, src.Name)
	}
	for {
		var open int
		var who sql.NullString
		err := src.DB.QueryRowContext(ctx, `SELECT count(*), string_agg(pid || ' (' || coalesce(application_name, '') || ', ' || state || ')', ', ') FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND xact_start <= $1`, fencedAt).Scan(&open, &who)
		if err == nil && open == 0 {
			err = src.DB.QueryRowContext(ctx, `SELECT count(*), string_agg(gid, ', ') FROM pg_prepared_xacts WHERE database = current_database() AND prepared <= $1`, fencedAt).Scan(&open, &who)
		}
		if err != nil {
			return fmt.Errorf("reshard: wait for the transactions open on %s: %w", src.Name, err)
		}
		if open == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reshard: %d transactions open on %s since the fence: %s: %w", open, src.Name, who.String, ctx.Err())
		case <-time.After(cfg.PollInterval):
		}
	}
}

// waitAcks waits until every client of the store routes with version v or
// later, or has been silent for longer than its lease (it then refuses to
// route), for at most Config.SwitchTimeout.
func waitAcks(ctx context.Context, cfg Config, v int64) error {
	deadline := time.Now().Add(cfg.SwitchTimeout)
	for {
		cs, err := cfg.Store.Clients(ctx)
		if err != nil {
			return fmt.Errorf("reshard: list the map's clients: %w", err)
		}
		var behind []string
		for _, c := range cs {
			if c.Version < v && c.Age <= c.Lease {
				behind = append(behind, fmt.Sprintf("%s (version %d, %s ago)", c.ID, c.Version, c.Age.Round(time.Millisecond)))
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: after the publish of version %d, clients still route with an older map: %s; the moved buckets stay fenced: run Switch again",
				ErrSwitchTimeout, v, strings.Join(behind, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cfg.PollInterval):
		}
	}
}
