package plugin

import (
	"context"
	"database/sql"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freshread/freshread/internal/lib/roundtrip"
)

// Stalled replicas (Config.StallTimeout; docs/design/reliability.md): a
// replica that stops answering without breaking its connections would hold
// every read sent to it until the read's context ends. Each replica read
// is watched until its first answer (QueryContext returning: the rows that
// follow are not bounded, so a large result is never cut short). When the
// answer is later than the replica's usual (its first answers' round trip
// estimate, RFC 6298: twice the smoothed time plus four deviations, at
// least stallFloor, at most StallTimeout), the replica is alive if it has
// answered anything since the read was sent (another read's first
// answer, a poll: a loaded replica keeps answering), else it is pinged on
// another connection. Alive or answering the ping, the read is slow (a
// heavy query, a busy replica): it goes on, checked again every
// StallTimeout. If the ping does not answer within what is left of
// StallTimeout, the replica is stalled: it is marked down until a poll
// answers, the read is cancelled and run again elsewhere (the primary, or
// for an overlapped read wherever the rule sends it). One ping at a time
// per replica answers every read waiting on it. A read waits on a stalled
// replica at most max(StallTimeout, twice its bound).

// stallFloor is the least bound on a replica's first answer: below it a
// loaded machine's scheduling alone would ping healthy replicas.
const stallFloor = 50 * time.Millisecond

// replicaStall is what a replica's reads know of its answers.
type replicaStall struct {
	rtt   roundtrip.Estimator // first answers of reads that were not stalled
	probe atomic.Pointer[stallProbe]
	// answers: when the replica last answered a read or a poll. A read
	// past its bound while other reads get answers is slow, not stalled
	// (no ping needed).
	answers roundtrip.Answers
}

// stallProbe is one ping of a replica, shared by the reads that wait.
type stallProbe struct {
	start time.Time
	done  chan struct{}
	alive bool
}

// Watch states.
const (
	watchArmed    int32 = iota // waiting for the first answer, timer set
	watchChecking              // the timer fired: the replica is being pinged
	watchDone                  // the first answer came
	watchStalled               // the replica is stalled: the read was cancelled
)

// stallWatch watches one replica read until its first answer. It is
// recycled when the answer comes before its timer fires.
type stallWatch struct {
	p      *Plugin
	r      *replica
	cancel context.CancelFunc
	start  time.Time
	bound  time.Duration
	timer  *time.Timer
	state  atomic.Int32
}

var stallWatches sync.Pool

// watchReplica starts watching a read sent to r now, cancelled by cancel
// if r stalls.
func (p *Plugin) watchReplica(r *replica, cancel context.CancelFunc) *stallWatch {
	w, _ := stallWatches.Get().(*stallWatch)
	if w == nil {
		w = &stallWatch{}
		// Made stopped: its goroutine reads w.timer, so the timer
		// starts (Reset, below) only once it is assigned.
		w.timer = time.AfterFunc(time.Duration(math.MaxInt64), w.fired)
		w.timer.Stop()
	}
	bound := r.stall.rtt.Timeout(stallFloor, p.cfg.StallTimeout)
	// Every field before the timer starts: its goroutine reads them.
	w.p, w.r, w.cancel, w.bound = p, r, cancel, bound
	w.start = time.Now()
	w.state.Store(watchArmed)
	w.timer.Reset(bound)
	return w
}

// done ends the watch when the read's first answer (or error) came, and
// reports whether the replica was found stalled (the read was cancelled:
// its result is not to be used). An answer that came in time adds to the
// replica's estimate.
func (w *stallWatch) done() (stalled bool) {
	for {
		switch s := w.state.Load(); s {
		case watchArmed:
			if !w.state.CompareAndSwap(watchArmed, watchDone) {
				continue
			}
			w.r.stall.rtt.Observe(time.Since(w.start))
			w.r.stall.answers.Answered()
			if w.timer.Stop() {
				w.p, w.r, w.cancel = nil, nil, nil
				stallWatches.Put(w)
			}
			return false
		case watchChecking:
			if w.state.CompareAndSwap(watchChecking, watchDone) {
				w.r.stall.answers.Answered() // a slow answer: not a sample of the usual
				return false
			}
		default:
			return s == watchStalled
		}
	}
}

// fired runs when the read has waited its bound: ping the replica.
func (w *stallWatch) fired() {
	if !w.state.CompareAndSwap(watchArmed, watchChecking) {
		return
	}
	ceiling := w.p.cfg.StallTimeout
	// Other reads (or a poll) answered since this one was sent: the
	// replica is busy, not stalled; else ask it.
	if w.r.stall.answers.Since(w.start) || w.p.pingReplica(w.r, w.start, max(ceiling-time.Since(w.start), w.bound)) {
		if w.state.CompareAndSwap(watchChecking, watchArmed) {
			w.timer.Reset(ceiling)
		}
		return
	}
	if w.state.CompareAndSwap(watchChecking, watchStalled) {
		w.cancel()
	}
}

// pingReplica reports whether r answers a ping within timeout, asked after
// since: the ping of another read waiting on r is shared when it began
// after since.
func (p *Plugin) pingReplica(r *replica, since time.Time, timeout time.Duration) bool {
	for {
		pr := r.stall.probe.Load()
		if pr != nil && !pr.start.Before(since) {
			<-pr.done
			return pr.alive
		}
		np := &stallProbe{start: time.Now(), done: make(chan struct{})}
		if !r.stall.probe.CompareAndSwap(pr, np) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		np.alive = r.db.PingContext(ctx) == nil
		cancel()
		if np.alive {
			r.stall.answers.Answered()
		}
		if !np.alive {
			// Down until a poll answers, as a replica whose read failed:
			// a follower of the shared poll keeps it down for
			// replicaRetryAfter whatever the holder's snapshots say (one
			// taken before the stall says up). Said once per transition,
			// not per ping or read.
			now := time.Now()
			r.state.Store(&replicaState{polledAt: now})
			r.failed.Store(now.UnixNano())
			if markReplicaDown(r) {
				p.cfg.Logger.Warn("freshread: replica is down (stalled: a read and a ping unanswered within StallTimeout); its reads run again elsewhere until a poll answers: check the server and the network path to it, or raise StallTimeout if it is only slow to answer",
					"replica", r.name, "stall_timeout", p.cfg.StallTimeout)
			}
		}
		close(np.done)
		return np.alive
	}
}

// queryReplica runs a read on r, watched for a stall (Config.StallTimeout
// negative: not watched). stalled: r did not answer, nor a ping within the
// bound; the read was cancelled and nothing is returned.
func (p *Plugin) queryReplica(ctx context.Context, r *replica, query string, args []any) (rows *sql.Rows, err error, stalled bool) {
	if p.cfg.StallTimeout < 0 {
		rows, err = r.db.QueryContext(ctx, query, args...)
		return rows, err, false
	}
	rctx, cancel := context.WithCancel(ctx)
	w := p.watchReplica(r, cancel)
	rows, err = r.db.QueryContext(rctx, query, args...)
	if w.done() {
		if rows != nil {
			rows.Close()
		}
		cancel()
		return nil, nil, true
	}
	if err != nil {
		cancel()
		return rows, err, false
	}
	releaseWith(rows, ctx, cancel)
	return rows, nil, false
}

// queryRowReplica is queryReplica for QueryRowContext.
func (p *Plugin) queryRowReplica(ctx context.Context, r *replica, query string, args []any) (row *sql.Row, stalled bool) {
	if p.cfg.StallTimeout < 0 {
		return r.db.QueryRowContext(ctx, query, args...), false
	}
	rctx, cancel := context.WithCancel(ctx)
	w := p.watchReplica(r, cancel)
	row = r.db.QueryRowContext(rctx, query, args...)
	if w.done() {
		cancel() // closes the row's rows
		return nil, true
	}
	if row.Err() != nil {
		cancel()
		return row, false
	}
	releaseWith(row, ctx, cancel)
	return row, false
}

// releaseWith releases the read's context once its result (rows or a row,
// which use it until closed) is garbage: a context derived from a parent
// that can end is kept by the parent until cancelled. One derived from a
// parent that cannot end is not kept by anything.
func releaseWith[T any](result *T, parent context.Context, cancel context.CancelFunc) {
	if parent.Done() == nil {
		return
	}
	runtime.AddCleanup(result, func(c context.CancelFunc) { c() }, cancel)
}

// replicaStalled reports a read moved off a stalled replica (marked down,
// and logged, by the ping that found it stalled).
func (p *Plugin) replicaStalled(ctx context.Context, r *replica) {
	p.decided(ctx, Decision{Target: Primary, Replica: r.name, Reason: ReasonReplicaStalled})
}
