package tracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/freshread/freshread/depgraph"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/registry"
)

// worker tracks one database. Its loops share lazily connecting pools,
// which reconnect by themselves after an outage; each loop retries on its
// own tick.
type worker struct {
	t      *Tracker
	entry  registry.Entry
	id     string
	log    *slog.Logger
	cancel context.CancelFunc

	writes *lsnstore.Redis // write positions (WriteTTL)
	replay *lsnstore.Redis // replay positions (ReplayTTL)

	mu       sync.Mutex
	primary  *pgxpool.Pool
	replicas map[string]*pgxpool.Pool

	// streaming is true while ModeLogical's stream is open.
	streaming atomic.Bool
	// decodeErr is the last decoding error, "" when streaming.
	decodeErr atomic.Pointer[string]
	// formatErr is the store's refusal of this build's format (nil while
	// the store accepts it): the worker publishes nothing meanwhile, and
	// ready reports it.
	formatErr atomic.Pointer[error]
	// ddlTrigger: the DDL event trigger is in place; ddlWarned: its
	// absence was logged. Touched by the decoding goroutine only.
	ddlTrigger, ddlWarned bool
}

func newWorker(t *Tracker, e registry.Entry) *worker {
	prefix := e.Prefix
	if prefix == "" {
		prefix = t.cfg.Prefix
	}
	w := &worker{t: t, entry: e, id: e.ID(), log: t.log.With("database", e.ID()), replicas: map[string]*pgxpool.Pool{}}
	w.writes = lsnstore.NewRedis(t.cfg.Redis, lsnstore.RedisOptions{Database: e.StoreName(), Prefix: prefix, TTL: t.cfg.WriteTTL, Timeout: t.cfg.RedisTimeout})
	w.replay = lsnstore.NewRedis(t.cfg.Redis, lsnstore.RedisOptions{Database: e.StoreName(), Prefix: prefix, TTL: t.cfg.ReplayTTL, Timeout: t.cfg.RedisTimeout})
	return w
}

// pool returns the pool of role ("primary" or a replica name), creating it
// (without connecting) on first use.
func (w *worker) pool(role string) (*pgxpool.Pool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if role == "primary" && w.primary != nil {
		return w.primary, nil
	}
	if p := w.replicas[role]; p != nil {
		return p, nil
	}
	target := Target{Host: w.entry.Host, Port: w.entry.Port, Database: w.entry.Database, Role: role}
	if role != "primary" {
		for _, r := range w.entry.Replicas {
			if r.Name == role {
				target.Host, target.Port = r.Host, r.Port
			}
		}
	}
	dsn, err := w.t.dsn(target)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, w.t.secrets.err(fmt.Errorf("tracker: parse DSN of %s: %w", role, err))
	}
	cfg.MaxConns = 4
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = time.Minute
	cfg.ConnConfig.RuntimeParams["application_name"] = "freshread-tracker"
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, w.t.secrets.err(err)
	}
	if role == "primary" {
		w.primary = p
	} else {
		w.replicas[role] = p
	}
	return p, nil
}

func (w *worker) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.primary != nil {
		w.primary.Close()
	}
	for _, p := range w.replicas {
		p.Close()
	}
}

// run runs the worker's loops until ctx ends, while the position store
// accepts this build's format (awaitFormat, watchFormat).
func (w *worker) run(ctx context.Context) {
	defer w.close()
	for w.awaitFormat(ctx) {
		loopCtx, stop := context.WithCancel(ctx)
		go w.watchFormat(loopCtx, stop)
		w.runLoops(loopCtx)
		stop()
	}
}

// runLoops runs the worker's loops until ctx ends.
func (w *worker) runLoops(ctx context.Context) {
	var wg sync.WaitGroup
	loops := []func(context.Context){w.replayLoop, w.depsLoop}
	switch w.t.cfg.Mode {
	case ModeStats:
		loops = append(loops, w.statsLoop)
	case ModeLogical:
		loops = append(loops, w.decodeLoop)
	}
	for _, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l(ctx)
		}()
	}
	wg.Wait()
}

// ticker calls f every d (and once at once) until ctx ends. Errors are
// counted and logged on a change of state only (failing / recovered).
func (w *worker) ticker(ctx context.Context, name string, d time.Duration, f func(context.Context) error) {
	failing := false
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		err := f(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.t.metrics.errors.WithLabelValues(w.id, name).Inc()
			if !failing {
				w.log.Warn("tracker loop failing; retrying", "loop", name, "err", w.t.secrets.err(err))
			}
			failing = true
		} else if failing {
			w.log.Info("tracker loop recovered", "loop", name)
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *worker) replayLoop(ctx context.Context) {
	w.ticker(ctx, "replay", w.t.cfg.ReplayInterval, w.replayOnce)
}

const replicationQuery = `
SELECT application_name::text, replay_lsn::text,
       coalesce(extract(epoch FROM replay_lag), 0)::float8,
       pg_current_wal_lsn()::text
FROM pg_stat_replication`

// replayOnce reads each replica's replay position and publishes them.
func (w *worker) replayOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, err := w.pool("primary")
	if err != nil {
		return err
	}
	type repl struct {
		lsn lsnstore.LSN
		lag float64
	}
	byApp := map[string]repl{}
	var current lsnstore.LSN
	rows, err := p.Query(ctx, replicationQuery)
	if err == nil {
		for rows.Next() {
			var app string
			var replay *string
			var lag float64
			var cur string
			if err = rows.Scan(&app, &replay, &lag, &cur); err != nil {
				break
			}
			current, _ = lsnstore.ParseLSN(cur)
			if replay != nil {
				if l, perr := lsnstore.ParseLSN(*replay); perr == nil {
					byApp[app] = repl{l, lag}
				}
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		w.t.metrics.databaseUp.WithLabelValues(w.id).Set(0)
		return fmt.Errorf("read pg_stat_replication: %w", err)
	}
	w.t.metrics.databaseUp.WithLabelValues(w.id).Set(1)
	if current == 0 {
		var cur string
		if err := p.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&cur); err == nil {
			current, _ = lsnstore.ParseLSN(cur)
		}
	}
	positions := map[string]lsnstore.LSN{}
	var errs []error
	for _, r := range w.entry.Replicas {
		if r.Host == "" {
			app := r.ApplicationName
			if app == "" {
				app = r.Name
			}
			if x, ok := byApp[app]; ok {
				positions[r.Name] = x.lsn
				w.t.metrics.replayLagSeconds.WithLabelValues(w.id, r.Name).Set(x.lag)
			}
			continue
		}
		rp, err := w.pool(r.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var s *string
		if err := rp.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&s); err != nil || s == nil {
			if err == nil {
				err = errors.New("pg_last_wal_replay_lsn() is NULL: not a standby")
			}
			errs = append(errs, fmt.Errorf("replica %s: %w", r.Name, err))
			continue
		}
		l, err := lsnstore.ParseLSN(*s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		positions[r.Name] = l
		if x, ok := byApp[r.ApplicationName]; ok && r.ApplicationName != "" {
			w.t.metrics.replayLagSeconds.WithLabelValues(w.id, r.Name).Set(x.lag)
		} else if x, ok := byApp[r.Name]; ok {
			w.t.metrics.replayLagSeconds.WithLabelValues(w.id, r.Name).Set(x.lag)
		}
	}
	for name, l := range positions {
		lag := 0.0
		if current > l {
			lag = float64(current - l)
		}
		w.t.metrics.replayLagBytes.WithLabelValues(w.id, name).Set(lag)
	}
	if w.t.cfg.Mode == ModeLogical {
		var lag *int64
		if err := p.QueryRow(ctx, "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::int8 FROM pg_replication_slots WHERE slot_name = $1",
			w.slotName()).Scan(&lag); err == nil && lag != nil {
			w.t.metrics.decodingLagBytes.WithLabelValues(w.id).Set(float64(max(*lag, 0)))
		}
	}
	// A replica that could not be read is left out: its key expires after
	// ReplayTTL, and the plugin stops trusting it.
	published := make(map[string]lsnstore.Position, len(positions))
	for name, l := range positions {
		published[name] = lsnstore.PositionOf(l)
	}
	if err := w.replay.PublishReplay(ctx, published); err != nil {
		w.t.metrics.redisUp.Set(0)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (w *worker) depsLoop(ctx context.Context) {
	w.ticker(ctx, "dependencies", w.t.cfg.DependencyInterval, w.depsOnce)
}

// lastGraph is the version of the last graph logged, to log changes only.
func (w *worker) depsOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := w.pool("primary")
	if err != nil {
		return err
	}
	g, err := depgraph.AnalyzePostgres(ctx, p)
	if err != nil {
		return err
	}
	var tables int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM pg_stat_user_tables").Scan(&tables); err == nil {
		w.t.metrics.tablesTracked.WithLabelValues(w.id).Set(float64(tables))
	}
	closed := g.Closed()
	old, _ := w.writes.DependentsVersion(ctx)
	if err := w.writes.PublishDependents(ctx, closed); err != nil {
		return err
	}
	w.t.metrics.dependencyEdges.WithLabelValues(w.id).Set(float64(g.EdgeCount()))
	w.t.metrics.everything.WithLabelValues(w.id).Set(float64(len(g.Reasons)))
	if v, _ := w.writes.DependentsVersion(ctx); v != old {
		w.log.Info("dependency graph published", "tables", len(closed), "edges", g.EdgeCount(), "version", v)
		for table, reasons := range g.Reasons {
			w.log.Info("writes to this table may write any table: reads after them use the database-wide position",
				"table", table, "reasons", reasons)
		}
	}
	return nil
}

// ready checks the primary (and replicas with an address) now.
func (w *worker) ready(ctx context.Context) error {
	p, err := w.pool("primary")
	if err != nil {
		return err
	}
	var errs []error
	if err := p.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("primary: %w", err))
	}
	if w.t.cfg.Mode == ModeLogical && !w.streaming.Load() {
		msg := "not started"
		if s := w.decodeErr.Load(); s != nil {
			msg = *s
		}
		errs = append(errs, fmt.Errorf("logical decoding not streaming: %s", msg))
	}
	if e := w.formatErr.Load(); e != nil {
		errs = append(errs, fmt.Errorf("publishing nothing: %w", *e))
	}
	return errors.Join(errs...)
}
