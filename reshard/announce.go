package reshard

import (
	"context"
	"errors"
	"fmt"

	"github.com/freshread/freshread/sharding"
)

// announce makes every process that follows the map know of the move
// before the first row is copied: it publishes the current map again
// under a new version (same owners) after the move's status was saved,
// and waits until every client routes with that version or has gone
// silent past its lease. A client's acknowledgement of a version comes
// after the Load that returned it, and that Load returned the moves saved
// before the publish, so from then on every process's routing snapshot
// lists the move: scatter reads that cannot filter rows by owner (raw
// SQL) are refused while it is pending, instead of reading the target's
// partial copy (sharding docs, "Scatter reads during a move").
func (m *Mover) announce(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		bm, err := current(ctx, m.cfg)
		if err != nil {
			return err
		}
		v, err := m.cfg.Store.Publish(ctx, bm.Version, bm)
		if errors.Is(err, sharding.ErrMapConflict) && attempt < 10 {
			continue // another publisher: load again
		}
		if err != nil {
			return fmt.Errorf("reshard: move %s: announce the move (publish the map again): %w", m.mv.ID, err)
		}
		if err := waitAcks(ctx, m.cfg, v); err != nil {
			return fmt.Errorf("reshard: move %s: announce the move: %w", m.mv.ID, err)
		}
		m.cfg.Logger.InfoContext(ctx, "reshard: every process knows of the move", "move", m.mv.ID, "version", v)
		return nil
	}
}
