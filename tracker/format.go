package tracker

import (
	"context"
	"errors"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// formatCheckEvery bounds how often a worker checks its store's format
// again while it runs: at most every minute, and at least every quarter
// of the write positions' TTL, so that the tracker's record in the store
// (lsnstore.FormatChecker) never lapses while it runs.
func (w *worker) formatCheckEvery() time.Duration {
	return min(time.Minute, max(w.t.cfg.WriteTTL/4, time.Second))
}

// awaitFormat checks the store's format until the store accepts this
// build beside the processes that use it, and returns true then; false
// when ctx ends first. A refusal (lsnstore.ErrStoreFormat: a process of a
// release this one cannot run beside shares the store) is logged as an
// ERROR naming both releases, and a store that does not answer as a
// warning, each once per change of state; the worker publishes nothing
// meanwhile, so it never writes data the other processes would misread.
func (w *worker) awaitFormat(ctx context.Context) bool {
	var logged string
	t := time.NewTicker(max(w.t.cfg.ReplayInterval, time.Second))
	defer t.Stop()
	for {
		err := w.writes.CheckFormat(ctx)
		if err == nil {
			w.formatErr.Store(nil)
			if logged != "" {
				w.log.Info("tracker: the position store's format is accepted; publishing")
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		state := "unreachable"
		if errors.Is(err, lsnstore.ErrStoreFormat) {
			state = "refused"
			w.formatErr.Store(&err)
		}
		w.t.metrics.errors.WithLabelValues(w.id, "format").Inc()
		if state != logged {
			if state == "refused" {
				w.log.Error("tracker: the position store is used by a freshread release this tracker cannot run beside; it publishes nothing for this database until they agree: run one release line on a store (see the operations guide, Upgrades)", "err", err)
			} else {
				w.log.Warn("tracker: cannot check the position store's format; publishing waits until it answers", "err", w.t.secrets.err(err))
			}
			logged = state
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// watchFormat checks the store's format every formatCheckEvery until ctx
// ends, and calls stop when the store refuses this build: the worker's
// loops end, publishing nothing more, and run waits for the format again.
// A check the store does not answer stops nothing: the loops meet the
// same store and count their own errors.
func (w *worker) watchFormat(ctx context.Context, stop context.CancelFunc) {
	t := time.NewTicker(w.formatCheckEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.writes.CheckFormat(ctx); errors.Is(err, lsnstore.ErrStoreFormat) {
			w.formatErr.Store(&err)
			w.t.metrics.errors.WithLabelValues(w.id, "format").Inc()
			w.log.Error("tracker: the position store is now used by a freshread release this tracker cannot run beside; it stops publishing for this database until they agree: run one release line on a store (see the operations guide, Upgrades)", "err", err)
			stop()
			return
		}
	}
}
