package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/lib/sqlerr"
	"github.com/freshread/freshread/internal/metrics"
	"github.com/freshread/freshread/lsnstore"
)

// A writer cut off from the store (docs/design/reliability.md). The
// plugin's reader of a shared store holds a lease (lsnstore.Leaser,
// Config.WriterLease) that its poll renews. A write that committed but
// could be neither published nor invalidated is acknowledged only once
// the lease has surely ended, by when every other process refuses the
// anchor it trusted and then waits for the primary's position; and a
// write is committed only while the lease surely holds for a while yet
// (fenceWrite).

// ErrStoreUnreachable is returned by a write that the plugin refused to
// commit because less than a fifth of this process's lease in the
// position store (Config.WriterLease) was left and a renewal just then
// failed (fenceMargin, fenceWrite): the process had not reached the store
// for 0.3 to 0.8 of its lease. Committed, the write could be read stale
// by the processes that still reach the store. On PostgreSQL it is also
// returned by a statement of a transaction whose connection another
// process ended because this process's lease had lapsed (writer_fence.go).
// Nothing was committed; the write may be retried once the store is
// reachable.
var ErrStoreUnreachable = errors.New("plugin: the position store is unreachable from this process; the write was not committed")

// IsStoreUnreachable reports whether err is a write refused because the
// store was unreachable.
func IsStoreUnreachable(err error) bool { return errors.Is(err, ErrStoreUnreachable) }

// leaser is the plugin's lease, when its store is shared and leases are
// on.
func (p *Plugin) leaser() (lsnstore.Leaser, bool) {
	if p.cfg.WriterLease <= 0 {
		return nil, false
	}
	l, ok := p.cfg.Store.(lsnstore.Leaser)
	return l, ok
}

// fenceMargin is how much of the lease must be left to commit: a COMMIT
// that returns within it is covered by the lease even if nothing can be
// published.
func (p *Plugin) fenceMargin() time.Duration { return p.cfg.WriterLease / 5 }

// fenceWrite returns ErrStoreUnreachable (wrapped) when this process's
// lease has ended or has less than fenceMargin left and cannot be renewed
// now: a write committed then could be read stale by others, if it could
// not be published. Called before a write commits.
func (p *Plugin) fenceWrite(ctx context.Context) error {
	l, ok := p.leaser()
	if !ok {
		return nil
	}
	// A resting poller gives the lease up (rest.go) only when no write
	// passed this fence for a lease's length.
	p.restMu.RLock()
	defer p.restMu.RUnlock()
	p.lastFence.Store(time.Now().UnixNano())
	if time.Until(l.LeaseUntil()) >= p.fenceMargin() {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.PublishTimeout)
	err := l.RenewLease(rctx)
	cancel()
	if time.Until(l.LeaseUntil()) >= p.fenceMargin() {
		return nil
	}
	p.stats.fencedWrites.Add(1)
	if err == nil {
		err = errors.New("the lease was not renewed")
	}
	return fmt.Errorf("%w (its lease in the store had %s left of %s, less than a fifth, and could not be renewed: %v); retry when the store is reachable, or check the network between this process and Redis", ErrStoreUnreachable, leaseLeft(l.LeaseUntil()), p.cfg.WriterLease, err)
}

// leaseLeft says how much of a lease ending at until is left, for an
// error: "none" once it has ended.
func leaseLeft(until time.Time) string {
	left := time.Until(until)
	if until.IsZero() || left <= 0 {
		return "none"
	}
	return left.Round(time.Millisecond).String()
}

// awaitLease holds the acknowledgement of w, committed at committed but
// neither published nor invalidated, until this process's lease has
// surely ended, trying to publish meanwhile; it reports whether w is
// covered (published, or committed within the lease and the lease now
// gone). The context is the publication's own, not the caller's.
func (p *Plugin) awaitLease(ctx context.Context, w writeSet, committed time.Time) bool {
	l, ok := p.leaser()
	if !ok {
		return false
	}
	if !w.tagged && !committed.Before(l.LeaseUntil()) {
		// Through a tagged connection (writer_tag.go), a commit that
		// returned after the lease's end is covered too: the others
		// end the connection before they take their floor.
		return false
	}
	p.awaiting.Add(1)
	defer p.awaiting.Add(-1)
	// The lease must end: a renewal now would keep the others' anchor
	// alive past the write.
	l.HoldRenewal(true)
	defer l.HoldRenewal(false)
	for {
		gone := l.LeaseGone()
		wait := time.Until(gone)
		if wait <= 0 {
			return true
		}
		select {
		case <-time.After(min(wait, 100*time.Millisecond)):
		case <-p.stop:
			// Closing: the lease ends without renewal as well.
			time.Sleep(time.Until(l.LeaseGone()))
			return true
		}
		pctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
		err := p.raiseNow(pctx, w)
		cancel()
		if err == nil {
			return true
		}
	}
}

// releaseLease gives the lease up when the plugin closes.
func (p *Plugin) releaseLease() {
	if l, ok := p.leaser(); ok {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PublishTimeout)
		defer cancel()
		_ = l.ReleaseLease(ctx)
	}
}

// fenceUnseenCommit refuses, before it is sent, a write whose commit the
// plugin does not fence at a COMMIT of its own, while fenceWrite refuses
// commits, and reports whether it did: a write that commits as it runs
// (outside a transaction), and each write of a transaction the plugin
// did not begin (GORM's Begin on a pinned *sql.Conn: a *sql.Tx, which
// commits where the plugin cannot see it; its COMMIT is then covered
// unless it comes more than fenceMargin after its last write while the
// store is unreachable). A write in a transaction the plugin began, or in
// one begun in raw SQL on a pinned connection, is fenced at its COMMIT.
func (p *Plugin) fenceUnseenCommit(db *gorm.DB) bool {
	switch c := db.Statement.ConnPool.(type) {
	case *trackedTx, *gorm.PreparedStmtTX, *replaySession:
		return false // fenced at its COMMIT
	case *sql.Conn:
		if _, open := p.pinnedTxOf(c); open {
			return false // fenced at its COMMIT (fencePinnedCommit)
		}
	}
	if p.beginOwnTx(db) {
		return db.Error != nil // fenced at its COMMIT (own_tx.go)
	}
	tagged, err := p.fenceAutocommitTagged(db)
	if !tagged {
		err = p.fenceWrite(db.Statement.Context)
	}
	if err != nil {
		db.AddError(err)
		return true
	}
	return false
}

// fencePinnedCommit refuses, before it is sent, the COMMIT of a
// transaction begun in raw SQL on a pinned connection (db.Connection) that
// wrote, while fenceWrite refuses commits; it reports whether it did. The
// transaction stays open: the caller's ROLLBACK ends it.
func (p *Plugin) fencePinnedCommit(db *gorm.DB, conn *sql.Conn) bool {
	t, open := p.pinnedTxOf(conn)
	if !open {
		return false
	}
	t.mu.Lock()
	wrote := !t.w.empty()
	t.mu.Unlock()
	if !wrote {
		return false
	}
	ctx := db.Statement.Context
	var err error
	if p.tags.tagger != nil {
		err = p.fenceTagged(ctx, 0, func() (uint32, error) { return p.takeTag(ctx, conn, true) })
		if sqlerr.PostgresCode(err) == "25P02" {
			// A failed transaction: its COMMIT rolls back.
			return false
		}
		if err == nil {
			t.mu.Lock()
			t.w.tagged = true
			t.mu.Unlock()
		}
	} else {
		err = p.fenceWrite(ctx)
	}
	if err != nil {
		db.AddError(err)
		return true
	}
	return false
}

// The lease's metrics (metrics.go).
var (
	descFenced      = metrics.NewDesc("freshread_writes_fenced_total", "Writes refused before they committed because this process's lease in the position store ended (ErrStoreUnreachable).", nil)
	descUnprotected = metrics.NewDesc("freshread_writes_unprotected_total", "Committed writes neither published, nor announced to the other processes, nor covered by this process's lease: they may be read stale elsewhere.", nil)
)
