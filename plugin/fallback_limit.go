package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// ErrFallbackLimited is returned by a read that no replica could serve
// fresh (every replica behind, none up, the store failing) when this
// process already sends Config.MaxFallbackRate such reads a second to the
// primary: the read fails instead of adding to the primary's load.
// IsFallbackLimited reports it.
var ErrFallbackLimited = errors.New("plugin: read refused: the primary already takes Config.MaxFallbackRate fallback reads a second")

// IsFallbackLimited reports whether err is a read refused by
// Config.MaxFallbackRate.
func IsFallbackLimited(err error) bool { return errors.Is(err, ErrFallbackLimited) }

// fallbackLimiter admits reads that fall back to the primary at a rate,
// with a burst: the generic cell rate algorithm, one atomic
// compare-and-swap per admitted read, no lock.
type fallbackLimiter struct {
	interval  int64        // nanoseconds between reads at the rate
	tolerance int64        // nanoseconds of burst beyond one read
	tat       atomic.Int64 // theoretical arrival time of the next read (unix nanoseconds)
}

// newFallbackLimiter returns a limiter for rate reads a second with burst,
// or nil for no limit (rate 0).
func newFallbackLimiter(rate float64, burst int) *fallbackLimiter {
	if rate <= 0 {
		return nil
	}
	interval := int64(float64(time.Second) / rate)
	return &fallbackLimiter{interval: interval, tolerance: int64(max(burst, 1)-1) * interval}
}

// allow reports whether one more read may go to the primary at now.
func (l *fallbackLimiter) allow(now time.Time) bool {
	t := now.UnixNano()
	for {
		tat := l.tat.Load()
		next := max(tat, t) + l.interval
		if next-t > l.tolerance+l.interval {
			return false
		}
		if l.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// half returns a limiter of half l's rate and half its burst (at least
// one read): the share of sessions' token-caused fallbacks.
func (l *fallbackLimiter) half() *fallbackLimiter {
	burst := l.tolerance/l.interval + 1
	return &fallbackLimiter{interval: 2 * l.interval, tolerance: max(burst/2-1, 0) * 2 * l.interval}
}

// limitedFallback reports whether a read falling back to the primary for
// reason must be refused (Config.MaxFallbackRate): only fallbacks are
// limited, the reasons a healthy deployment would have served from a
// replica; a read that needs the primary (a transaction, a lock, a
// session's write) never is. A refused read is counted by reason.
//
// A fallback caused by the session token (no usable replica has replayed
// the token's position: tokenCaused) must pass the sessions' share first:
// half the rate and half the burst. Tokens come from clients, so one
// client sending reads with a token just ahead of the replicas can take
// at most that half; the other half stays for every other fallback
// (docs/design/sessions.md).
func (p *Plugin) limitedFallback(ctx context.Context, reason Reason) error {
	if p.fallbacks == nil {
		return nil
	}
	switch reason {
	case ReasonLagging, ReasonStoreError:
	case ReasonNoReplica:
		if len(p.replicas()) == 0 {
			return nil // no replica configured: the primary is the design
		}
	default:
		return nil
	}
	now := time.Now()
	if p.tokenCaused(ctx) {
		g := &p.sessions
		g.shareOnce.Do(func() { g.share = p.fallbacks.half() })
		if !g.share.allow(now) {
			g.refused.Add(1)
			return p.refusedFallback(reason)
		}
	}
	if p.fallbacks.allow(now) {
		return nil
	}
	return p.refusedFallback(reason)
}

// refusedFallback counts a read refused by Config.MaxFallbackRate and
// returns its error.
func (p *Plugin) refusedFallback(reason Reason) error {
	if i := reasonIndex(reason); i >= 0 {
		p.stats.refused[i].Add(1)
	}
	return fmt.Errorf("%w (%s)", ErrFallbackLimited, reason)
}

// fallbackTo is the pool of a read decided for the primary (d): the
// primary, or a refusedPool when limitedFallback refuses it.
func (p *Plugin) fallbackTo(ctx context.Context, primary gorm.ConnPool, d Decision) gorm.ConnPool {
	if err := p.limitedFallback(ctx, d.Reason); err != nil {
		return refusedPool{ConnPool: primary, err: err}
	}
	p.decided(ctx, d)
	return primary
}

// refusedPool is the pool of a read refused by limitedFallback: every call
// returns the error, except QueryRowContext, whose *sql.Row cannot carry
// one: it runs on the primary (Row and Scan reads through it are not
// limited).
type refusedPool struct {
	gorm.ConnPool // the primary's
	err           error
}

func (r refusedPool) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, r.err
}

func (r refusedPool) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, r.err
}

func (r refusedPool) PrepareContext(context.Context, string) (*sql.Stmt, error) {
	return nil, r.err
}
