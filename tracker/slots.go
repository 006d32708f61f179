package tracker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DropSlots drops the replication slot of every database the tracker
// would track (static and registry), for `freshread tracker --drop-slot`.
// A slot that a running tracker is streaming from cannot be dropped: stop
// it first. The publication is kept (it costs nothing without a slot).
func (t *Tracker) DropSlots(ctx context.Context) error {
	entries, err := t.entries(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		slot := SlotName(t.cfg.SlotPrefix, e.Database)
		dsn, err := t.dsn(Target{Host: e.Host, Port: e.Port, Database: e.Database, Role: "primary"})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			errs = append(errs, t.secrets.err(fmt.Errorf("%s: %w", e.ID(), err)))
			continue
		}
		var n int
		err = c.QueryRow(ctx, "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n)
		c.Close(ctx)
		if err != nil {
			errs = append(errs, t.secrets.err(fmt.Errorf("%s: drop slot %s: %w", e.ID(), slot, err)))
			continue
		}
		if n > 0 {
			t.log.Info("replication slot dropped", "database", e.ID(), "slot", slot)
		} else {
			t.log.Info("no replication slot to drop", "database", e.ID(), "slot", slot)
		}
	}
	return errors.Join(errs...)
}

// Graphs analyses the dependencies of every database the tracker would
// track, once, without publishing: for `freshread tracker --print-graph`.
func (t *Tracker) Graphs(ctx context.Context) (map[string]*Graph, error) {
	entries, err := t.entries(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*Graph{}
	var errs []error
	for _, e := range entries {
		dsn, err := t.dsn(Target{Host: e.Host, Port: e.Port, Database: e.Database, Role: "primary"})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			errs = append(errs, t.secrets.err(fmt.Errorf("%s: %w", e.ID(), err)))
			continue
		}
		g, err := AnalyzeDependencies(ctx, c)
		c.Close(ctx)
		if err != nil {
			errs = append(errs, t.secrets.err(fmt.Errorf("%s: %w", e.ID(), err)))
			continue
		}
		out[e.ID()] = g
	}
	return out, errors.Join(errs...)
}
