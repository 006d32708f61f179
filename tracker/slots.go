package tracker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/freshread/freshread/depgraph"
	"github.com/freshread/freshread/registry"
)

// forEachPrimary connects to the primary of every database the tracker
// would track (static and registry), one at a time, and runs f; errors are
// collected (redacted), not fatal.
func (t *Tracker) forEachPrimary(ctx context.Context, f func(e registry.Entry, c *pgx.Conn) error) error {
	entries, err := t.entries(ctx)
	if err != nil {
		return err
	}
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
		err = f(e, c)
		c.Close(ctx)
		if err != nil {
			errs = append(errs, t.secrets.err(fmt.Errorf("%s: %w", e.ID(), err)))
		}
	}
	return errors.Join(errs...)
}

// DropSlots drops the replication slot of every database the tracker
// would track (static and registry), for `freshread tracker --drop-slot`.
// A slot that a running tracker is streaming from cannot be dropped: stop
// it first. The publication is kept (it costs nothing without a slot).
func (t *Tracker) DropSlots(ctx context.Context) error {
	return t.forEachPrimary(ctx, func(e registry.Entry, c *pgx.Conn) error {
		slot := SlotName(t.cfg.SlotPrefix, e.Database)
		var n int
		if err := c.QueryRow(ctx, "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
			return fmt.Errorf("drop slot %s: %w", slot, err)
		}
		if n > 0 {
			t.log.Info("replication slot dropped", "database", e.ID(), "slot", slot)
		} else {
			t.log.Info("no replication slot to drop", "database", e.ID(), "slot", slot)
		}
		return nil
	})
}

// Graphs analyses the dependencies of every database the tracker would
// track, once, without publishing: for `freshread tracker --print-graph`.
func (t *Tracker) Graphs(ctx context.Context) (map[string]*depgraph.Graph, error) {
	out := map[string]*depgraph.Graph{}
	err := t.forEachPrimary(ctx, func(e registry.Entry, c *pgx.Conn) error {
		g, err := depgraph.AnalyzePostgres(ctx, c)
		if err != nil {
			return err
		}
		out[e.ID()] = g
		return nil
	})
	return out, err
}
