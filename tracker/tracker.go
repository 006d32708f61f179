package tracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/registry"
)

// Tracker publishes, for every registered database, its replicas' replay
// positions, its dependency graph and (by Mode) the positions of writes
// made outside the plugin. Create it with New, run it with Run.
type Tracker struct {
	cfg     Config
	log     *slog.Logger
	secrets *secrets
	metrics *metrics
	gather  prometheus.Gatherer

	mu      sync.Mutex
	workers map[string]*worker // by registry.Entry.ID()
	started bool
}

// New checks cfg and returns a tracker. It connects to nothing.
func New(cfg Config) (*Tracker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &secrets{}
	t := &Tracker{cfg: cfg, secrets: s, workers: map[string]*worker{}}
	t.log = slog.New(redactHandler{inner: cfg.Logger.Handler(), s: s})
	lsnstore.LogRedisTo(cfg.Redis, t.log) // Redis's refusals (NOPERM) in the tracker's log
	reg, gather := cfg.Registerer, cfg.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gather = r, r
	}
	if gather == nil {
		gather = prometheus.DefaultGatherer
	}
	t.metrics = newMetrics(reg)
	t.gather = gather
	return t, nil
}

// dsn returns the connection string of target, remembering its password
// as a secret.
func (t *Tracker) dsn(target Target) (string, error) {
	d, err := t.cfg.DSN(target)
	if err != nil {
		return "", t.secrets.err(fmt.Errorf("tracker: DSN for %s:%d/%s: %w", target.Host, target.Port, target.Database, err))
	}
	t.secrets.add(passwordOf(d))
	return d, nil
}

// Run tracks databases until ctx ends; it returns nil then. It rereads the
// registry every RegistryInterval, starting a worker for each new database
// and stopping those that left.
func (t *Tracker) Run(ctx context.Context) error {
	t.mu.Lock()
	if t.started {
		t.mu.Unlock()
		return errors.New("tracker: Run called twice")
	}
	t.started = true
	t.mu.Unlock()

	var wg sync.WaitGroup
	defer func() {
		t.mu.Lock()
		for _, w := range t.workers {
			w.cancel()
		}
		t.mu.Unlock()
		wg.Wait()
	}()
	t.log.Info("freshread tracker started", "mode", string(t.cfg.Mode), "static_databases", len(t.cfg.Databases), "registry", !t.cfg.NoRegistry)
	tick := time.NewTicker(t.cfg.RegistryInterval)
	defer tick.Stop()
	failing := false
	for {
		entries, err := t.entries(ctx)
		if err != nil {
			t.metrics.errors.WithLabelValues("", "registry").Inc()
			t.metrics.redisUp.Set(0)
			if !failing {
				t.log.Warn("cannot read the registry; tracking the databases known so far", "err", t.secrets.err(err))
			}
			failing = true
		} else {
			if failing {
				t.log.Info("registry readable again")
			}
			failing = false
			t.reconcile(ctx, entries, &wg)
		}
		select {
		case <-ctx.Done():
			t.log.Info("freshread tracker stopping")
			return nil
		case <-tick.C:
		}
	}
}

func (t *Tracker) entries(ctx context.Context) ([]registry.Entry, error) {
	entries := slices.Clone(t.cfg.Databases)
	if t.cfg.NoRegistry {
		return entries, nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.RedisTimeout)
	defer cancel()
	reg, bad, err := registry.Entries(ctx, t.cfg.Redis, t.cfg.Prefix)
	if err != nil {
		return nil, err
	}
	if bad > 0 {
		t.log.Warn("registry members skipped: not a valid entry", "count", bad)
	}
	for _, e := range reg {
		if !slices.ContainsFunc(entries, func(x registry.Entry) bool { return x.ID() == e.ID() }) {
			entries = append(entries, e)
		}
	}
	return entries, nil
}

// reconcile starts workers for new entries, restarts those whose entry
// changed and stops those that left.
func (t *Tracker) reconcile(ctx context.Context, entries []registry.Entry, wg *sync.WaitGroup) {
	t.mu.Lock()
	defer t.mu.Unlock()
	want := map[string]registry.Entry{}
	for _, e := range entries {
		want[e.ID()] = e
	}
	for id, w := range t.workers {
		if e, ok := want[id]; !ok || e.Canonical() != w.entry.Canonical() {
			t.log.Info("stopping database", "database", id)
			w.cancel()
			delete(t.workers, id)
			t.metrics.forget(id)
		}
	}
	for id, e := range want {
		if _, ok := t.workers[id]; ok {
			continue
		}
		w := newWorker(t, e)
		t.workers[id] = w
		wctx, cancel := context.WithCancel(ctx)
		w.cancel = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(wctx)
		}()
		t.log.Info("tracking database", "database", id, "replicas", len(e.Replicas))
	}
	t.metrics.registrySize.Set(float64(len(t.workers)))
	t.metrics.redisUp.Set(1)
}

// Ready reports whether Redis and every tracked database (and, in
// ModeLogical, its decoding stream) are reachable now: nil, or an error
// naming what is not. Checks run concurrently, each bounded by timeout.
func (t *Tracker) Ready(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	if err := t.cfg.Redis.Ping(ctx).Err(); err != nil {
		errs = append(errs, fmt.Errorf("redis: %w", err))
		t.metrics.redisUp.Set(0)
	} else {
		t.metrics.redisUp.Set(1)
	}
	t.mu.Lock()
	workers := make([]*worker, 0, len(t.workers))
	for _, w := range t.workers {
		workers = append(workers, w)
	}
	started := t.started
	t.mu.Unlock()
	if !started {
		errs = append(errs, errors.New("tracker not running"))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.ready(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", w.id, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return t.secrets.err(errors.Join(errs...))
}

// Handler serves /healthz (the process runs), /readyz (Ready, 503 with
// the reasons when not) and /metrics (Prometheus).
func (t *Tracker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := t.Ready(r.Context(), 2*time.Second); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready:\n%v\n", err)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(t.gather, promhttp.HandlerOpts{}))
	return mux
}

// backoff is an exponential delay from 100ms to 10s.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = 100 * time.Millisecond
	} else {
		b.d = min(2*b.d, 10*time.Second)
	}
	return b.d
}

func (b *backoff) reset() { b.d = 0 }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
