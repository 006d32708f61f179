package plugin

import (
	"context"
	"fmt"
	"time"
)

// RecordWrite publishes a write of tables that committed on the primary
// without going through this plugin: rows copied by another program
// (package reshard's bucket mover), a bulk load over a plain connection,
// psql. It reads the primary's current position and raises the tables'
// positions (and their dependents') in the store exactly as the commit of
// a write through the plugin does, so reads of those tables go to the
// primary until a replica has replayed the write; the caller's session
// (SessionFrom(ctx)) is raised too. Call it after the write's COMMIT
// returned: a position read before it would be below the commit record.
// Table names are normalized like the plugin's (schema dropped, quotes
// removed, lower case); no table means the unknown-tables position, which
// every read includes.
//
// When the position cannot be read or the store refuses it, the write is
// kept pending (this process reads from the primary until the poller
// publishes it, and the other processes sharing the store are told, as
// after a failed publish) and the error is returned.
// With the tracker daemon in logical mode (docs/design/tracker.md) such writes
// are published anyway, from the decoded WAL; RecordWrite closes the
// window before the tracker has decoded them.
func (p *Plugin) RecordWrite(ctx context.Context, tables ...string) error {
	if !p.initialized.Load() || p.engine == nil {
		return ErrNotInstalled
	}
	var w writeSet
	if len(tables) == 0 {
		w.add(nil)
	} else {
		w.add(normalizeTables(tables))
	}
	called := time.Now() // the write committed before
	ctx, cancel := p.publishContext(ctx)
	defer cancel()
	pos, err := p.currentPosition(ctx)
	if err != nil {
		p.unpublished(ctx, w, called)
		return fmt.Errorf("plugin: record write: read the primary's position: %w", err)
	}
	if s := SessionFrom(ctx); s != nil {
		s.wrote(time.Now())
		s.raise(p.cluster, pos)
	}
	if err := p.raise(ctx, w, pos); err != nil {
		p.unpublished(ctx, w, called)
		return fmt.Errorf("plugin: record write: publish: %w", err)
	}
	return nil
}
