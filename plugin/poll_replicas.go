package plugin

import (
	"context"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// primaryView is what a poll read of the primary before it asked the
// replicas.
type primaryView struct {
	ins, flush lsnstore.Position
	ok         bool
	// threshold is what a replica must have replayed to be within MaxLag.
	threshold lsnstore.Position
}

// replicaAnswerWait bounds how long a poll waits for the replicas'
// answers before it goes on (publishing, pending writes, waking waiters):
// an answer that comes later is stored by its own goroutine when it
// comes, and published by the next poll.
func (p *Plugin) replicaAnswerWait() time.Duration {
	return max(p.cfg.PollInterval, 100*time.Millisecond)
}

// pollReplicas reads every replica's replay position at once, each on its
// own goroutine with its own deadline (pollTimeout), so that a replica
// that stalls holds up neither the other replicas' states nor the rest of
// the poll. A replica whose previous read is still out is not asked
// again: its state stays the last answer, which becomes unusable once
// older than MaxLag (replicaState.usable), and a failure once the read's
// deadline passes. Positions the tracker published (fromStore) are taken
// as they are. It returns the positions of the replicas that answered, up
// at most replicaAnswerWait after it asked (every answer with waitAll).
func (p *Plugin) pollReplicas(ctx context.Context, fromStore map[string]lsnstore.Position, pv primaryView, waitAll bool) map[string]lsnstore.Position {
	replicas := p.replicas()
	published := make(map[string]lsnstore.Position, len(replicas))
	type answer struct {
		name string
		st   *replicaState
	}
	answers := make(chan answer, len(replicas))
	asked := 0
	for _, r := range replicas {
		if pos, ok := fromStore[r.name]; ok {
			if st := p.storeReplicaState(r, pos, nil, pv); st.up {
				published[r.name] = st.pos
			}
			p.noteReplicaHealth(ctx, r, nil)
			continue
		}
		if !r.polling.CompareAndSwap(false, true) {
			continue // its last read is still out
		}
		asked++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer r.polling.Store(false)
			rctx, cancel := context.WithTimeout(p.lifetime(), p.pollTimeout())
			defer cancel()
			pos, err := p.engine.replayPosition(rctx, r.db)
			if err != nil && privilegeDenied(err) {
				p.warnReplayPrivilege(rctx, r, err)
			}
			st := p.storeReplicaState(r, pos, err, pv)
			p.noteReplicaHealth(rctx, r, err)
			answers <- answer{r.name, st}
		}()
	}
	var late <-chan time.Time
	if !waitAll {
		t := time.NewTimer(p.replicaAnswerWait())
		defer t.Stop()
		late = t.C
	}
	for ; asked > 0; asked-- {
		select {
		case a := <-answers:
			if a.st.up {
				published[a.name] = a.st.pos
			}
		case <-late:
			return published
		case <-ctx.Done():
			return published
		}
	}
	return published
}

// storeReplicaState stores r's state from a poll's answer (err: it
// failed). The answer replaces the last one even when it is lower: a
// replica rebuilt or restarted from an older state shows older data.
func (p *Plugin) storeReplicaState(r *replica, pos lsnstore.Position, err error, pv primaryView) *replicaState {
	st := &replicaState{polledAt: time.Now()}
	if err == nil {
		if pv.ok && pos.Covers(pv.flush) && idleCaughtUp(pv.ins, pv.flush) {
			pos = pv.ins
		}
		st.pos, st.up = pos, true
		r.stall.answers.Answered()
		st.withinLag = pos.Covers(pv.threshold)
	}
	r.state.Store(st)
	return st
}

// lifetime is a context cancelled when the plugin closes.
func (p *Plugin) lifetime() context.Context {
	if p.life == nil {
		return context.Background()
	}
	return p.life
}
