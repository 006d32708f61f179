package reshard

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/freshread/freshread/sharding"
)

// RunReport is what Run did.
type RunReport struct {
	// Copy is what the copy phase did.
	Copy CopyReport
	// CatchUp is what the catch-up phase did.
	CatchUp CatchUpReport
	// Switch is what the switch did; nil when Run did not switch.
	Switch *SwitchReport
}

// Run prepares, copies, catches up and switches the move, resuming from
// whatever phase its state records (a switched move returns at once).
// Cleanup is left to a separate call.
func (m *Mover) Run(ctx context.Context) (*RunReport, error) {
	done, err := m.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rep := &RunReport{}
	if err := m.prepare(ctx); err != nil {
		return rep, err
	}
	if rep.Copy, err = m.copy(ctx); err != nil {
		return rep, err
	}
	st, err := m.readState(ctx)
	if err != nil {
		return rep, err
	}
	if st.phase == sharding.MoveCatchingUp {
		if rep.CatchUp, err = m.catchUp(ctx, false); err != nil {
			return rep, err
		}
	}
	rep.Switch, err = switchMoves(ctx, m.cfg, []*Mover{m})
	return rep, err
}

// Plan is several moves that switch together: one fence of every source,
// one publish of a map with every move applied, one wait for the clients,
// one unfence of every target. A migration from an unsharded database is a
// Plan: the database is a shard that owns every bucket (Config.InitialMap),
// and there is one move per target shard; stage one (reads that accept a
// lag use the shards) is Follow, stage two (every read and write) is the
// switch. A shard may not be both a source and a target in one Plan, and
// no bucket may be in two moves.
type Plan struct {
	cfg    Config
	movers []*Mover
}

// NewPlan returns a plan of moves.
func NewPlan(cfg Config, moves ...Move) (*Plan, error) {
	if len(moves) == 0 {
		return nil, fmt.Errorf("%w: a plan without moves", ErrConfig)
	}
	p := &Plan{cfg: cfg.withDefaults()}
	sources, targets := map[string]bool{}, map[string]bool{}
	buckets := map[int]string{}
	ids := map[string]bool{}
	for _, mv := range moves {
		m, err := New(cfg, mv)
		if err != nil {
			return nil, err
		}
		mv = m.mv
		if ids[mv.ID] {
			return nil, fmt.Errorf("%w: move ID %s twice in a plan", ErrConfig, mv.ID)
		}
		ids[mv.ID] = true
		for _, b := range mv.Buckets {
			if other, ok := buckets[b]; ok {
				return nil, fmt.Errorf("%w: bucket %d is in moves %s and %s", ErrConfig, b, other, mv.ID)
			}
			buckets[b] = mv.ID
		}
		sources[mv.From], targets[mv.To] = true, true
		p.movers = append(p.movers, m)
	}
	for s := range sources {
		if targets[s] {
			return nil, fmt.Errorf("%w: shard %s is both a source and a target in the plan", ErrConfig, s)
		}
	}
	return p, nil
}

// Movers returns the plan's movers (for their own phases, Status, Verify).
func (p *Plan) Movers() []*Mover { return slices.Clone(p.movers) }

// begin begins every mover of the plan.
func (p *Plan) begin(ctx context.Context) (func(), error) {
	var dones []func()
	release := func() {
		for i := len(dones) - 1; i >= 0; i-- {
			dones[i]()
		}
	}
	for _, m := range p.movers {
		d, err := m.begin(ctx)
		if err != nil {
			release()
			return nil, err
		}
		dones = append(dones, d)
	}
	return release, nil
}

// Run prepares, copies and catches up every move (one after the other),
// then switches them together, resuming from the recorded phases.
func (p *Plan) Run(ctx context.Context) (*SwitchReport, error) {
	done, err := p.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := p.catchUpAll(ctx); err != nil {
		return nil, err
	}
	return switchMoves(ctx, p.cfg, p.movers)
}

// catchUpAll runs every move up to caught up.
func (p *Plan) catchUpAll(ctx context.Context) error {
	for _, m := range p.movers {
		if err := m.prepare(ctx); err != nil {
			return err
		}
		if _, err := m.copy(ctx); err != nil {
			return err
		}
	}
	for _, m := range p.movers {
		st, err := m.readState(ctx)
		if err != nil {
			return err
		}
		if st.phase == sharding.MoveCatchingUp {
			if _, err := m.catchUp(ctx, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// Prepare, Copy and CatchUp run every move up to caught up; Follow then
// keeps every target caught up, a round per move every interval, until
// ctx ends (migration stage one), and returns nil then.
func (p *Plan) Follow(ctx context.Context, interval time.Duration) error {
	done, err := p.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := p.catchUpAll(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped: the moves stay resumable (Switch checks that the copies are done)
		}
		return err
	}
	for {
		for _, m := range p.movers {
			if _, err := m.catchUp(ctx, true); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// Switch switches every move of the plan together (see Mover.Switch).
func (p *Plan) Switch(ctx context.Context) (*SwitchReport, error) {
	done, err := p.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return switchMoves(ctx, p.cfg, p.movers)
}

// Cleanup cleans every move up (see Mover.Cleanup).
func (p *Plan) Cleanup(ctx context.Context) (CleanupReport, error) {
	done, err := p.begin(ctx)
	if err != nil {
		return CleanupReport{}, err
	}
	defer done()
	total := CleanupReport{Tables: map[string]int64{}}
	start := time.Now()
	for _, m := range p.movers {
		r, err := m.cleanup(ctx)
		total.Rows += r.Rows
		for t, n := range r.Tables {
			total.Tables[t] += n
		}
		if err != nil {
			return total, err
		}
	}
	total.Duration = time.Since(start)
	return total, nil
}

// Rollback rolls every move back (see Mover.Rollback).
func (p *Plan) Rollback(ctx context.Context) error {
	done, err := p.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	for _, m := range p.movers {
		if err := m.rollback(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Diff returns the moves that turn the owners from into the owners to
// (same length): one per (source, target) pair, buckets sorted.
func Diff(from, to []string) ([]Move, error) {
	if len(from) != len(to) {
		return nil, fmt.Errorf("%w: %d buckets, then %d", ErrConfig, len(from), len(to))
	}
	type pair struct{ from, to string }
	byPair := map[pair][]int{}
	var order []pair
	for b := range from {
		if from[b] == to[b] {
			continue
		}
		k := pair{from[b], to[b]}
		if byPair[k] == nil {
			order = append(order, k)
		}
		byPair[k] = append(byPair[k], b)
	}
	var out []Move
	for _, k := range order {
		out = append(out, Move{Buckets: byPair[k], From: k.from, To: k.to})
	}
	return out, nil
}

// WaitCaughtUp waits until the store's status of every move of the plan
// says its target has caught up at least once (migration stage one is
// then serving), polling every interval, or until followErr (the result
// of a Follow running alongside) delivers: a Follow that ended before
// catching up is an error.
func (p *Plan) WaitCaughtUp(ctx context.Context, interval time.Duration, followErr <-chan error) error {
	want := map[string]bool{}
	for _, m := range p.movers {
		want[m.mv.ID] = true
	}
	for {
		_, moves, _, err := p.cfg.Store.Load(ctx)
		if err != nil {
			return fmt.Errorf("reshard: load the moves' status: %w", err)
		}
		n := 0
		for _, mv := range moves {
			if want[mv.ID] && mv.Phase == sharding.MoveCatchingUp && mv.CaughtUpAge >= 0 {
				n++
			}
		}
		if n == len(want) {
			return nil
		}
		select {
		case err := <-followErr:
			if err == nil {
				err = fmt.Errorf("%w: Follow returned before every move caught up", ErrPhase)
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
