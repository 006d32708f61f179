package lsnstore

import (
	"context"
	"sync"
	"time"
)

// callCtx bounds one store call by the store's per-call timeout without
// the allocations of context.WithTimeout (a context, a timer and a
// channel per call, five allocations on every read): it is recycled with
// its channel and timer while the timer has not fired.
//
// Its Done channel closes when the timeout passes, which is what go-redis
// waits on (a free pooled connection) besides the deadline it gives the
// socket. A cancellation of the parent during the call is not seen: the
// call is short by construction (it ends by the timeout at the latest);
// a parent already ended is refused before the call starts.
type callCtx struct {
	parent   context.Context
	deadline time.Time
	done     chan struct{}
	timer    *time.Timer
	// start and rtt: a call that ends before its timeout adds its round
	// trip to rtt (nil: none).
	start time.Time
	rtt   *roundTrips
}

var callCtxs sync.Pool

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *callCtx) Done() <-chan struct{}       { return c.done }
func (c *callCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *callCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return c.parent.Err()
	}
}

// newCallCtx returns a context that ends timeout from now (parent's
// values, parent's error if it ended already); a call that ends before
// it adds its round trip to rtt (nil: none).
func newCallCtx(parent context.Context, timeout time.Duration, rtt *roundTrips) *callCtx {
	c, _ := callCtxs.Get().(*callCtx)
	if c == nil {
		c = &callCtx{done: make(chan struct{})}
		done := c.done
		c.timer = time.AfterFunc(timeout, func() { close(done) })
	} else {
		c.timer.Reset(timeout)
	}
	c.parent, c.rtt = parent, rtt
	c.start = time.Now()
	c.deadline = c.start.Add(timeout)
	return c
}

// release ends the call: it adds the call's round trip to its estimate and
// the context is recycled, unless its timer fired
// (its channel is closed for good). A fired context is left as it is: a
// context derived from it during the call (go-redis derives one while it
// sets up a connection) is ended by a goroutine of package context that
// reads it (Value, through Cause) when it likes. Nil-safe.
func (c *callCtx) release() {
	if c == nil {
		return
	}
	if c.timer.Stop() {
		if c.rtt != nil {
			c.rtt.observe(time.Since(c.start))
		}
		c.parent, c.rtt = nil, nil
		callCtxs.Put(c)
	}
}
