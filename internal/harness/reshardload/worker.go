package reshardload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

// WorkerConfig is one worker: a writer and reader of its own users.
type WorkerConfig struct {
	// DB is a *gorm.DB with the sharding plugin S installed.
	DB *gorm.DB
	S  *sharding.Sharding
	// Users are the user IDs this worker owns (nobody else writes them).
	Users []int64
	// Seed seeds the worker's random choices.
	Seed uint64
	// ReadFraction is the share of operations that are reads. Default 0.5.
	ReadFraction float64
	// Pause is the pause between two operations. Default 0 (none).
	Pause time.Duration
	// LagRead, when positive, makes one read in four a read with
	// sharding.AllowLag(LagRead) (migration stage one).
	LagRead time.Duration
}

// OrderState is what the worker acknowledged last for one order.
type OrderState struct {
	ID      int64 `json:"id"`
	UserID  int64 `json:"user_id"`
	ItemID  int64 `json:"item_id"`
	Version int64 `json:"version"`
	Deleted bool  `json:"deleted,omitempty"`
	// Uncertain: the last write's outcome is unknown (either state is
	// accepted for this order until a later write is acknowledged).
	Uncertain bool `json:"uncertain,omitempty"`
}

// Stats counts what a worker did and saw.
type Stats struct {
	Creates, Updates, Deletes, Reads int
	// Refused counts writes that failed with a known outcome (nothing
	// written): ErrBucketMoved past the plugin's retries, ErrMapStale.
	Refused int
	// Uncertain counts writes whose outcome is unknown.
	Uncertain int
	// ReadErrors counts reads that failed (no rows were used).
	ReadErrors int
	// Anomalies are reads or writes that contradict the log: a missed,
	// stale or phantom row, an update or delete that matched nothing.
	Anomalies []string
	// Writes are the acknowledged writes' start times and latencies.
	Writes []Sample
	// ScatterReads counts reads of one order by a column that is not a
	// shard key (every shard that owns buckets is read).
	ScatterReads int
	// IDReads counts reads of one order by its ID alone (routed by the
	// bucket the minted ID embeds, through the current map).
	IDReads int
	// LagReads counts reads with sharding.AllowLag (checked loosely: no
	// row that was never written, no version above the acknowledged one).
	LagReads int
	// Errors counts failed operations by error text (first 100 kinds).
	Errors map[string]int
}

// Sample is one acknowledged write: when it began (Unix nanoseconds) and
// how long it took (nanoseconds).
type Sample struct {
	At int64 `json:"t"`
	D  int64 `json:"d"`
}

// Result is a finished worker's log and stats.
type Result struct {
	Orders map[int64]*OrderState `json:"orders"`
	Stats  Stats                 `json:"stats"`
	// Metrics are the process's sharding counters (first result of a
	// process only).
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// Run runs the worker until ctx is done.
func Run(ctx context.Context, cfg WorkerConfig) Result {
	if cfg.ReadFraction == 0 {
		cfg.ReadFraction = 0.5
	}
	w := &worker{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		orders: map[int64]*OrderState{}, byUser: map[int64][]int64{}}
	w.stats.Errors = map[string]int{}
	for ctx.Err() == nil && len(cfg.Users) > 0 {
		u := cfg.Users[w.rng.IntN(len(cfg.Users))]
		if w.rng.Float64() < cfg.ReadFraction {
			if cfg.LagRead > 0 && w.rng.IntN(4) == 0 {
				w.lagRead(ctx, u)
				continue
			}
			switch w.rng.IntN(8) {
			case 0:
				w.scatterRead(ctx, u)
				continue
			case 1:
				w.idRead(ctx, u)
				continue
			}
			w.read(ctx, u)
		} else {
			w.write(ctx, u)
		}
		if cfg.Pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(cfg.Pause):
			}
		}
	}
	return Result{Orders: w.orders, Stats: w.stats}
}

type worker struct {
	cfg    WorkerConfig
	rng    *rand.Rand
	orders map[int64]*OrderState
	byUser map[int64][]int64 // live or uncertain order IDs per user
	stats  Stats
	mu     sync.Mutex
}

func (w *worker) fail(op string, err error) {
	key := op + ": " + err.Error()
	if len(key) > 200 {
		key = key[:200]
	}
	if _, ok := w.stats.Errors[key]; ok || len(w.stats.Errors) < 100 {
		w.stats.Errors[key]++
	}
}

// knownNotWritten says err leaves nothing written: the statement was
// refused before or by the shard (rolled back).
func knownNotWritten(err error) bool {
	return errors.Is(err, sharding.ErrBucketMoved) || errors.Is(err, sharding.ErrMapStale) ||
		errors.Is(err, sharding.ErrNoShardKey) || errors.Is(err, sharding.ErrCrossShard)
}

func (w *worker) write(ctx context.Context, u int64) {
	ids := w.byUser[u]
	switch {
	case len(ids) == 0 || w.rng.IntN(4) == 0:
		w.create(ctx, u)
	case w.rng.IntN(8) == 0:
		w.delete(ctx, u, ids[w.rng.IntN(len(ids))])
	default:
		w.update(ctx, u, ids[w.rng.IntN(len(ids))])
	}
}

func (w *worker) ack(start time.Time) {
	w.stats.Writes = append(w.stats.Writes, Sample{At: start.UnixNano(), D: int64(time.Since(start))})
}

func (w *worker) create(ctx context.Context, u int64) {
	oid, err := w.cfg.S.NewID(u)
	if err != nil {
		w.fail("mint", err)
		return
	}
	iid, err := w.cfg.S.NewID(u)
	if err != nil {
		w.fail("mint", err)
		return
	}
	st := &OrderState{ID: oid, UserID: u, ItemID: iid, Version: 1}
	start := time.Now()
	err = w.cfg.S.ForUser(w.cfg.DB.WithContext(ctx), u).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Order{ID: oid, UserID: u, Amount: int64(w.rng.IntN(1000)), Version: 1, Note: noteOf(oid)}).Error; err != nil {
			return err
		}
		return tx.Create(&Item{ID: iid, OrderID: oid, UserID: u, Sku: "sku-" + fmt.Sprint(iid%97)}).Error
	})
	switch {
	case err == nil:
		w.ack(start)
		w.stats.Creates++
	case knownNotWritten(err) || ctx.Err() != nil && errors.Is(err, context.Canceled):
		// Nothing written (a cancelled transaction rolls back unless
		// COMMIT was already sent; treat a cancel as uncertain below).
		if ctx.Err() != nil {
			st.Uncertain = true
			w.stats.Uncertain++
			break
		}
		w.stats.Refused++
		w.fail("create", err)
		return
	default:
		st.Uncertain = true
		w.stats.Uncertain++
		w.fail("create", err)
	}
	w.orders[oid] = st
	w.byUser[u] = append(w.byUser[u], oid)
}

func (w *worker) update(ctx context.Context, u, id int64) {
	st := w.orders[id]
	next := st.Version + 1
	start := time.Now()
	res := w.cfg.DB.WithContext(ctx).Model(&Order{}).Where("user_id = ? AND id = ?", u, id).
		Updates(map[string]any{"version": next, "amount": int64(w.rng.IntN(1000))})
	switch {
	case res.Error == nil:
		if res.RowsAffected != 1 && !st.Uncertain {
			w.anomaly("update of order %d (user %d, version %d) matched %d rows", id, u, st.Version, res.RowsAffected)
		}
		if res.RowsAffected == 1 {
			st.Version, st.Uncertain, st.Deleted = next, false, false
		}
		w.ack(start)
		w.stats.Updates++
	case knownNotWritten(res.Error):
		w.stats.Refused++
		w.fail("update", res.Error)
	default:
		// Unknown: the version may be next or the old one.
		st.Version, st.Uncertain = next, true
		w.stats.Uncertain++
		w.fail("update", res.Error)
	}
}

func (w *worker) delete(ctx context.Context, u, id int64) {
	st := w.orders[id]
	start := time.Now()
	err := w.cfg.S.ForUser(w.cfg.DB.WithContext(ctx), u).Transaction(func(tx *gorm.DB) error {
		res := tx.Where("user_id = ? AND id = ?", u, id).Delete(&Order{})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 && !st.Uncertain {
			w.anomaly("delete of order %d (user %d, version %d) matched %d rows", id, u, st.Version, res.RowsAffected)
		}
		return tx.Where("user_id = ? AND order_id = ?", u, id).Delete(&Item{}).Error
	})
	switch {
	case err == nil:
		st.Deleted, st.Uncertain = true, false
		w.ack(start)
		w.stats.Deletes++
		w.dropLive(u, id)
	case knownNotWritten(err):
		w.stats.Refused++
		w.fail("delete", err)
	default:
		st.Deleted, st.Uncertain = true, true
		w.stats.Uncertain++
		w.fail("delete", err)
		w.dropLive(u, id)
	}
}

func (w *worker) dropLive(u, id int64) {
	ids := w.byUser[u]
	for i, x := range ids {
		if x == id {
			w.byUser[u] = append(ids[:i:i], ids[i+1:]...)
			return
		}
	}
}

func (w *worker) anomaly(format string, args ...any) {
	if len(w.stats.Anomalies) < 1000 {
		w.stats.Anomalies = append(w.stats.Anomalies, fmt.Sprintf(format, args...))
	}
}

// read reads u's orders and items and checks them against the log (the
// worker is the only writer of u, so the log is the truth).
func (w *worker) read(ctx context.Context, u int64) {
	var got []Order
	if err := w.cfg.DB.WithContext(ctx).Where("user_id = ?", u).Find(&got).Error; err != nil {
		w.stats.ReadErrors++
		w.fail("read", err)
		return
	}
	var items []Item
	if err := w.cfg.DB.WithContext(ctx).Where("user_id = ?", u).Find(&items).Error; err != nil {
		w.stats.ReadErrors++
		w.fail("read", err)
		return
	}
	w.stats.Reads++
	seen := make(map[int64]bool, len(got))
	for _, o := range got {
		if seen[o.ID] {
			w.anomaly("read of user %d: order %d twice", u, o.ID)
		}
		seen[o.ID] = true
		st := w.orders[o.ID]
		switch {
		case st == nil:
			w.anomaly("read of user %d: order %d was never written", u, o.ID)
		case st.Uncertain:
		case st.Deleted:
			w.anomaly("read of user %d: order %d deleted but returned (version %d)", u, o.ID, o.Version)
		case o.Version != st.Version:
			w.anomaly("read of user %d: order %d version %d, acknowledged %d", u, o.ID, o.Version, st.Version)
		}
	}
	itemOf := make(map[int64]bool, len(items))
	for _, it := range items {
		itemOf[it.OrderID] = true
	}
	for _, id := range w.byUser[u] {
		st := w.orders[id]
		if st.Uncertain || st.Deleted {
			continue
		}
		if !seen[id] {
			w.anomaly("read of user %d: acknowledged order %d (version %d) missing", u, id, st.Version)
		}
		if !itemOf[id] {
			w.anomaly("read of user %d: item of acknowledged order %d missing", u, id)
		}
	}
}

// lagRead reads u's orders accepting a lag of cfg.LagRead: the rows may be
// an older state, so only what no state ever was is an anomaly.
func (w *worker) lagRead(ctx context.Context, u int64) {
	var got []Order
	if err := w.cfg.DB.WithContext(ctx).Clauses(sharding.AllowLag(w.cfg.LagRead)).Where("user_id = ?", u).Find(&got).Error; err != nil {
		w.stats.ReadErrors++
		w.fail("lag read", err)
		return
	}
	w.stats.LagReads++
	for _, o := range got {
		st := w.orders[o.ID]
		switch {
		case st == nil:
			w.anomaly("lag read of user %d: order %d was never written", u, o.ID)
		case o.Version > st.Version:
			w.anomaly("lag read of user %d: order %d version %d, above the acknowledged %d", u, o.ID, o.Version, st.Version)
		}
	}
}

// scatterRead reads one of u's orders by its note, which is no shard key:
// the read goes to every shard, each of which must return only rows of the
// buckets it owns, so the order comes back exactly once, in its current
// version, even while a copy of it sits on a target or a leftover on the
// source.
func (w *worker) scatterRead(ctx context.Context, u int64) {
	w.readOne(ctx, u, "scatter read", &w.stats.ScatterReads, func(id int64) (string, any) { return "note = ?", noteOf(id) })
}

// noteOf is an order's note: unique, with a quote and a backslash.
func noteOf(id int64) string { return "n'ote\\" + fmt.Sprint(id) }

// idRead reads one of u's orders by its ID alone: the minted ID embeds the
// bucket, so it routes to the bucket's owner in the current map, before
// and after the bucket moved.
func (w *worker) idRead(ctx context.Context, u int64) {
	w.readOne(ctx, u, "id read", &w.stats.IDReads, func(id int64) (string, any) { return "id = ?", id })
}

// readOne reads one of u's orders (chosen at random) by the condition
// cond gives for its ID, counts the read in count, and checks that it
// came back once at its acknowledged version (at most once when its last
// write's outcome is unknown).
func (w *worker) readOne(ctx context.Context, u int64, what string, count *int, cond func(id int64) (string, any)) {
	ids := w.byUser[u]
	if len(ids) == 0 {
		return
	}
	id := ids[w.rng.IntN(len(ids))]
	st := w.orders[id]
	q, arg := cond(id)
	var got []Order
	if err := w.cfg.DB.WithContext(ctx).Where(q, arg).Find(&got).Error; err != nil {
		w.stats.ReadErrors++
		w.fail(what, err)
		return
	}
	*count++
	switch {
	case st.Uncertain:
		if len(got) > 1 {
			w.anomaly("%s of order %d: %d rows", what, id, len(got))
		}
	case len(got) != 1:
		w.anomaly("%s of order %d (user %d, version %d): %d rows", what, id, u, st.Version, len(got))
	case got[0].Version != st.Version:
		w.anomaly("%s of order %d: version %d, acknowledged %d", what, id, got[0].Version, st.Version)
	}
}
