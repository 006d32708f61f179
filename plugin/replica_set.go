package plugin

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/freshread/freshread/internal/engines"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// drainCheck is how often a removed replica is checked for reads still
// waiting for a connection of its pool.
const drainCheck = 5 * time.Millisecond

// replicas returns the replicas reads may go to now. The slice is never
// changed: SetReplicas stores a new one.
func (p *Plugin) replicas() []*replica {
	if l := p.replicaSet.Load(); l != nil {
		return *l
	}
	return nil
}

// SetReplicas replaces the replicas reads may go to with replicas, checked
// as Config.Replicas is at db.Use: names unique and not empty, dialectors
// of the primary's kind, servers that replicate (ErrNotReplica), one
// server per DSN (ErrSeveralServers), and on PostgreSQL no pooler in
// transaction mode that the session cannot go through (ErrPooler). On any
// error nothing changes.
//
// A replica named as before with the same DSN and pool settings is kept as
// it is (its connections, its last known position). Any other is new:
// it is opened and serves no read until a poll has read its replay
// position and found it fresh enough for the read (within PollInterval
// when the replica is caught up). A replica not named any more is removed
// at once from the replicas reads are routed to; the reads already sent
// to it finish there, and its connections are closed once every read
// that chose it has its connection (a read that chose it but had not yet
// asked for a connection runs elsewhere). A replaced replica (same name,
// other DSN or pool settings) is removed and the new one added.
//
// With Config.Discovery, the replica set belongs to the discovery and
// SetReplicas returns ErrConfig. Before db.Use it returns ErrNotInstalled,
// after Close ErrClosed.
func (p *Plugin) SetReplicas(ctx context.Context, replicas []Replica) error {
	if p.cfg.Discovery != nil {
		return fmt.Errorf("%w: SetReplicas: the replicas are discovered (Config.Discovery); change the DNS records instead", ErrConfig)
	}
	return p.setReplicas(ctx, replicas)
}

// setReplicas is SetReplicas without the discovery check: the discovery
// calls it.
func (p *Plugin) setReplicas(ctx context.Context, replicas []Replica) error {
	p.setMu.Lock()
	defer p.setMu.Unlock()
	switch {
	case p.closing:
		return ErrClosed
	case p.gormDB == nil:
		return ErrNotInstalled
	}
	if err := validateReplicas(replicas, p.engine.dialectorName()); err != nil {
		return err
	}
	cur := p.replicas()
	next, err := p.openReplicas(ctx, replicas, cur)
	if err != nil {
		return err
	}
	if p.cfg.Announce {
		if err := p.announce(ctx, p.gormDB, replicas); err != nil {
			p.closeOpened(next, cur)
			return err
		}
	}
	p.replicaSet.Store(&next)
	var added, removed []string
	for _, r := range next {
		if !slices.Contains(cur, r) {
			added = append(added, r.name)
		}
	}
	for _, r := range cur {
		if !slices.Contains(next, r) {
			removed = append(removed, r.name)
			p.retire(r)
		}
	}
	if len(added) > 0 || len(removed) > 0 {
		p.stats.replicaSetChanges.Add(1)
		p.cfg.Logger.InfoContext(ctx, "freshread: replicas changed; a new replica serves reads once a poll has found it fresh enough, a removed one finishes its reads and closes its connections",
			"added", added, "removed", removed)
	}
	return nil
}

// openReplicas opens the replicas of rcs, keeping those of cur that have
// the same name and target. On an error it closes what it opened and
// returns the error.
func (p *Plugin) openReplicas(ctx context.Context, rcs []Replica, cur []*replica) ([]*replica, error) {
	out := make([]*replica, 0, len(rcs))
	prepared := p.gormDB.Config.PrepareStmt
	for _, rc := range rcs {
		target := targetOf(rc, p.cfg.ReplicaPool)
		if i := slices.IndexFunc(cur, func(r *replica) bool { return r.name == rc.Name && targetsEqual(r.target, target) }); i >= 0 {
			out = append(out, cur[i])
			continue
		}
		r, err := p.openReplica(ctx, p.gormDB, rc)
		if err == nil && p.engine.dialectorName() == "postgres" {
			if _, err = p.checkPooler(ctx, fmt.Sprintf("replica %q", rc.Name), r.db, prepared); err != nil {
				r.db.Close()
			}
		}
		if err != nil {
			p.closeOpened(out, cur)
			return nil, err
		}
		r.target = target
		out = append(out, r)
	}
	return out, nil
}

// closeOpened closes the replicas of opened that are not in kept.
func (p *Plugin) closeOpened(opened, kept []*replica) {
	for _, r := range opened {
		if !slices.Contains(kept, r) {
			r.db.Close()
		}
	}
}

// retire drains r, removed from the replica set: reads that chose it and
// have not asked for a connection yet go elsewhere (replica.enter), its
// poll is not asked again, and its pool is closed once the reads in
// flight have their connections (database/sql then closes each when its
// read releases it).
func (p *Plugin) retire(r *replica) {
	r.retired.Store(true)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(drainCheck)
		defer t.Stop()
		// Taking the polling flag keeps every later poll off r.
		for r.inFlight.Load() != 0 || !r.polling.CompareAndSwap(false, true) {
			select {
			case <-t.C:
			case <-p.stop:
				// Close closes the pools of the set; r is no longer in it.
			}
			if p.isStopped() {
				break
			}
		}
		r.db.Close()
	}()
}

// isStopped reports whether Close has begun.
func (p *Plugin) isStopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// replicaRemoved reports a read that chose r before r was removed and
// runs elsewhere.
func (p *Plugin) replicaRemoved(ctx context.Context, r *replica) {
	p.decided(ctx, Decision{Target: Primary, Replica: r.name, Reason: ReasonReplicaRemoved})
}

// validateReplicas checks a replica list for the primary's dialector.
func validateReplicas(replicas []Replica, dialector string) error {
	seen := make(map[string]bool, len(replicas))
	for i, r := range replicas {
		switch {
		case r.Name == "":
			return fmt.Errorf("%w: replica %d has no Name", ErrConfig, i)
		case seen[r.Name]:
			return fmt.Errorf("%w: duplicate replica name %q", ErrConfig, r.Name)
		case r.Dialector == nil:
			return fmt.Errorf("%w: replica %q has no Dialector", ErrConfig, r.Name)
		case r.Dialector.Name() != dialector:
			return fmt.Errorf("%w: replica %q: dialector %q differs from the primary's %q", ErrConfig, r.Name, r.Dialector.Name(), dialector)
		}
		seen[r.Name] = true
	}
	return nil
}

// replicaTarget is what a replica is opened on: its DSN (or its
// dialector, for one not opened from a DSN) and its pool settings.
type replicaTarget struct {
	dsn       string
	dialector gorm.Dialector // when dsn is ""
	pool      Pool
}

func targetOf(rc Replica, def Pool) replicaTarget {
	t := replicaTarget{pool: rc.Pool.over(def)}
	switch d := rc.Dialector.(type) {
	case *postgres.Dialector:
		if c := d.Config; c != nil && c.DSN != "" && c.Conn == nil && len(c.OptionOpenDB) == 0 {
			t.dsn = fmt.Sprintf("postgres %q %q %t %t %t", c.DriverName, c.DSN, c.WithoutQuotingCheck, c.PreferSimpleProtocol, c.WithoutReturning)
		}
	default:
		if engines.MySQL != nil {
			if key, ok := engines.MySQL.DialectorKey(d); ok {
				t.dsn = key
			}
		}
	}
	if t.dsn == "" {
		t.dialector = rc.Dialector
	}
	return t
}

// targetsEqual: a and b open the same server with the same pool. Two
// dialectors not opened from a DSN are equal only when they are the same
// comparable value (the same pointer, typically).
func targetsEqual(at, b replicaTarget) bool {
	if at.dsn != b.dsn || at.pool != b.pool {
		return false
	}
	if at.dsn != "" {
		return true
	}
	if at.dialector == nil || b.dialector == nil || !reflect.TypeOf(at.dialector).Comparable() || reflect.TypeOf(at.dialector) != reflect.TypeOf(b.dialector) {
		return false
	}
	return at.dialector == b.dialector
}
