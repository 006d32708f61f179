package lookup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/internal/lib/breaker"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/sharding"
)

// Config configures a Store.
type Config struct {
	// DB is the lookup database. Required.
	DB *gorm.DB
	// Table is the lookup table. Default "order_lookup".
	Table string
	// Redis is the cache; nil disables it.
	Redis redis.UniversalClient
	// Prefix of the cache keys. Default "freshread:lookup:".
	Prefix string
	// TTL of a cached pair. Default 10 minutes.
	TTL time.Duration
	// NegativeTTL of a cached "unknown ID". Default 2 seconds.
	NegativeTTL time.Duration
	// BreakerFailures is the number of consecutive failed cache calls
	// after which the circuit breaker opens: calls then skip Redis (the
	// table answers) without paying the client's dial timeout, and after a
	// backoff (100 ms doubling to 5 s) one call probes Redis again; a
	// probe that works closes the breaker. Default 3; negative disables
	// the breaker (every call tries Redis).
	BreakerFailures int
}

// Store is the lookup; it implements sharding.Lookup.
type Store struct {
	cfg Config

	br breaker.Breaker

	hits, negHits, misses, redisErrors, skips atomic.Int64
}

var (
	_ sharding.Lookup          = (*Store)(nil)
	_ sharding.LookupRefresher = (*Store)(nil)
)

// Stats are the cache counters since the Store was made.
type Stats struct {
	Hits         int64 // IDs answered by the cache
	NegativeHits int64 // of which cached as unknown
	Misses       int64 // IDs read from the table
	RedisErrors  int64 // failed cache calls (the table answered)
	BreakerSkips int64 // cache calls not made because the breaker was open
}

// HitRate is Hits / (Hits + Misses).
func (s Stats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

const negative = "-"

// New returns a Store.
func New(cfg Config) *Store {
	lsnstore.WatchRedis(cfg.Redis) // a refused command is logged and counted; failures name their cause
	if cfg.Table == "" {
		cfg.Table = "order_lookup"
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "freshread:lookup:"
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Minute
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = 2 * time.Second
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = 3
	}
	return &Store{cfg: cfg}
}

// Stats returns the cache counters.
func (s *Store) Stats() Stats {
	return Stats{Hits: s.hits.Load(), NegativeHits: s.negHits.Load(), Misses: s.misses.Load(), RedisErrors: s.redisErrors.Load(), BreakerSkips: s.skips.Load()}
}

// Migrate creates the lookup table and the backfill progress table, on
// PostgreSQL, MariaDB or MySQL.
func (s *Store) Migrate(ctx context.Context) error {
	q := s.quote(s.cfg.Table)
	source := "source text PRIMARY KEY"
	if !s.postgres() {
		source = "source varchar(255) PRIMARY KEY" // a TEXT key needs a prefix length there
	}
	for _, stmt := range []string{
		"CREATE TABLE IF NOT EXISTS " + q + " (order_id bigint PRIMARY KEY, user_id bigint NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + s.quote(s.cfg.Table+"_backfill") + " (" + source + ", last_id bigint NOT NULL, done boolean NOT NULL DEFAULT false, " + s.quote("rows") + " bigint NOT NULL DEFAULT 0)",
	} {
		if err := s.cfg.DB.WithContext(ctx).Exec(stmt).Error; err != nil {
			return fmt.Errorf("lookup: migrate: %w", err)
		}
	}
	return nil
}

func (s *Store) quote(name string) string {
	return s.cfg.DB.Statement.Quote(name)
}

// postgres reports whether the lookup database is PostgreSQL (otherwise
// MariaDB or MySQL).
func (s *Store) postgres() bool { return s.cfg.DB.Dialector.Name() == "postgres" }

// BreakerOpen reports whether the cache's circuit breaker is open (or
// probing): cache calls are skipped until a probe succeeds.
func (s *Store) BreakerOpen() bool { return s.br.Open() }

// cache runs one cache call through the circuit breaker. It reports
// whether the call was made and worked; a failure is counted in
// RedisErrors (and, unless ctx ended, towards opening the breaker), a call
// skipped by the open breaker in BreakerSkips.
func (s *Store) cache(ctx context.Context, call func() error) bool {
	now := time.Now()
	if s.cfg.BreakerFailures > 0 && !s.br.Allow(now) {
		s.skips.Add(1)
		return false
	}
	if err := call(); err != nil && !errors.Is(err, redis.Nil) {
		s.redisErrors.Add(1)
		// The backoff runs from the failure (a failed dial may take longer
		// than the first backoff); a cancelled caller is not an outage.
		if s.cfg.BreakerFailures > 0 && ctx.Err() == nil {
			s.br.Failure(time.Now(), s.cfg.BreakerFailures)
		}
		return false
	}
	if s.cfg.BreakerFailures > 0 {
		s.br.Success()
	}
	return true
}

func (s *Store) key(id int64) string { return s.cfg.Prefix + strconv.FormatInt(id, 10) }

type row struct {
	OrderID int64 `gorm:"column:order_id;primaryKey"`
	UserID  int64 `gorm:"column:user_id"`
}

// Put records pairs, then caches them. A pair already recorded for the
// same user is kept (a retried Create); one recorded for another user is
// refused with sharding.ErrIDInUse, and then none of the pairs is
// written (one transaction of two statements: the insert, and the
// owners read back).
func (s *Store) Put(ctx context.Context, pairs []sharding.Pair) error {
	_, err := s.put(ctx, pairs, false)
	return err
}

// PutFresh is Put, returning the order IDs whose pairs it wrote itself:
// the others were recorded for the same user already
// (sharding.LookupFresh). Of two PutFresh calls racing to record one pair,
// exactly one reports it: the database says which insert took it. One
// transaction: the insert (on PostgreSQL one statement per 1,000 pairs,
// INSERT ... ON CONFLICT DO NOTHING RETURNING; on MariaDB and MySQL one
// INSERT IGNORE per pair), and the owners of the pairs it did not write
// read back.
func (s *Store) PutFresh(ctx context.Context, pairs []sharding.Pair) ([]int64, error) {
	return s.put(ctx, pairs, true)
}

// insertFresh inserts rows, skipping order IDs recorded already, and
// returns the order IDs it inserted.
func (s *Store) insertFresh(tx *gorm.DB, rows []row) ([]int64, error) {
	table := s.quote(s.cfg.Table)
	var fresh []int64
	if s.postgres() {
		for start := 0; start < len(rows); start += 1000 {
			part := rows[start:min(start+1000, len(rows))]
			var b strings.Builder
			args := make([]any, 0, 2*len(part))
			b.WriteString("INSERT INTO " + table + " (order_id, user_id) VALUES ")
			for i, r := range part {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString("(?, ?)")
				args = append(args, r.OrderID, r.UserID)
			}
			b.WriteString(" ON CONFLICT (order_id) DO NOTHING RETURNING order_id")
			var ids []int64
			if err := tx.Raw(b.String(), args...).Scan(&ids).Error; err != nil {
				return nil, err
			}
			fresh = append(fresh, ids...)
		}
		return fresh, nil
	}
	for _, r := range rows {
		res := tx.Exec("INSERT IGNORE INTO "+table+" (order_id, user_id) VALUES (?, ?)", r.OrderID, r.UserID)
		if res.Error != nil {
			return nil, res.Error
		}
		if res.RowsAffected == 1 {
			fresh = append(fresh, r.OrderID)
		}
	}
	return fresh, nil
}

// put is Put, and PutFresh when tell.
func (s *Store) put(ctx context.Context, pairs []sharding.Pair, tell bool) ([]int64, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	var fresh []int64
	err := s.cfg.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		fresh = nil
		rows := make([]row, len(pairs))
		for i, p := range pairs {
			rows[i] = row{OrderID: p.OrderID, UserID: p.UserID}
		}
		if tell {
			ins, err := s.insertFresh(tx, rows)
			if err != nil {
				return err
			}
			fresh = ins
			took := make(map[int64]bool, len(ins))
			for _, id := range ins {
				took[id] = true
			}
			var others []row
			for _, r := range rows {
				if !took[r.OrderID] {
					others = append(others, r)
				}
			}
			if len(others) == 0 {
				return nil
			}
			return s.checkOwners(tx, others)
		}
		res := tx.Table(s.cfg.Table).Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "order_id"}},
			DoNothing: true,
		}).CreateInBatches(&rows, 1000)
		if res.Error != nil {
			return res.Error
		}
		// RowsAffected cannot say which rows conflicted (GORM counts the
		// rows of a RETURNING as given): read them back.
		return s.checkOwners(tx, rows)
	})
	if err != nil {
		return nil, fmt.Errorf("lookup: put: %w", err)
	}
	if s.cfg.Redis != nil {
		// On failure the table has it; a stale negative entry expires soon.
		s.cache(ctx, func() error {
			_, err := s.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, r := range pairs {
					p.Set(ctx, s.key(r.OrderID), r.UserID, s.cfg.TTL)
				}
				return nil
			})
			return err
		})
	}
	return fresh, nil
}

// owners reads the users the table records for ids.
func (s *Store) owners(tx *gorm.DB, ids []int64) (map[int64]int64, error) {
	var have []row
	if err := tx.Table(s.cfg.Table).Where("order_id IN ?", ids).Find(&have).Error; err != nil {
		return nil, err
	}
	out := make(map[int64]int64, len(have))
	for _, h := range have {
		out[h.OrderID] = h.UserID
	}
	return out, nil
}

// idInUse is the error of an order ID recorded for another user.
func idInUse(id, owner, user int64) error {
	return fmt.Errorf("%w: order %d is recorded for user %d, not %d (create it with a new ID)", sharding.ErrIDInUse, id, owner, user)
}

// checkOwners returns sharding.ErrIDInUse (wrapped) when an order ID of
// rows is recorded for another user than the row's.
func (s *Store) checkOwners(tx *gorm.DB, rows []row) error {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.OrderID
	}
	have, err := s.owners(tx, ids)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if u, ok := have[r.OrderID]; ok && u != r.UserID {
			return idInUse(r.OrderID, u, r.UserID)
		}
	}
	return nil
}

var _ sharding.LookupFresh = (*Store)(nil)

// Resolve returns the user ID of every known order ID.
func (s *Store) Resolve(ctx context.Context, ids []int64) (map[int64]int64, error) {
	out := make(map[int64]int64, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	missing := ids
	if s.cfg.Redis != nil {
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = s.key(id)
		}
		var vals []any
		if s.cache(ctx, func() (err error) { vals, err = s.getMany(ctx, keys); return err }) {
			missing = missing[:0:0]
			for i, v := range vals {
				str, ok := v.(string)
				switch {
				case !ok:
					missing = append(missing, ids[i])
				case str == negative:
					s.hits.Add(1)
					s.negHits.Add(1)
				default:
					u, err := strconv.ParseInt(str, 10, 64)
					if err != nil {
						missing = append(missing, ids[i])
						continue
					}
					s.hits.Add(1)
					out[ids[i]] = u
				}
			}
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	s.misses.Add(int64(len(missing)))
	var rows []row
	if err := s.cfg.DB.WithContext(ctx).Table(s.cfg.Table).Where("order_id IN ?", missing).Find(&rows).Error; err != nil {
		return out, fmt.Errorf("lookup: resolve: %w", err)
	}
	found := make(map[int64]bool, len(rows))
	for _, r := range rows {
		out[r.OrderID] = r.UserID
		found[r.OrderID] = true
	}
	if s.cfg.Redis != nil {
		s.cache(ctx, func() error {
			_, err := s.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, id := range missing {
					if found[id] {
						p.Set(ctx, s.key(id), out[id], s.cfg.TTL)
					} else {
						// SET NX: never overwrite a pair Put cached meanwhile.
						p.SetNX(ctx, s.key(id), negative, s.cfg.NegativeTTL)
					}
				}
				return nil
			})
			return err
		})
	}
	return out, nil
}

// getMany reads keys from the cache in one round trip per server: one
// MGET on a single server (a *redis.Client, Sentinel's included); on a
// Cluster (or a Ring) a pipeline of GETs, which go-redis splits by node
// and sends to the nodes at once. One MGET would fail there with CROSSSLOT
// (the keys of a batch of IDs hash to different slots), and hash-tagging
// every key into one slot would put every lookup on one node.
func (s *Store) getMany(ctx context.Context, keys []string) ([]any, error) {
	if _, single := s.cfg.Redis.(*redis.Client); single {
		return s.cfg.Redis.MGet(ctx, keys...).Result()
	}
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := s.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	vals := make([]any, len(keys))
	for i, c := range cmds {
		if v, err := c.Result(); err == nil {
			vals[i] = v
		} else if !errors.Is(err, redis.Nil) {
			return nil, err
		}
	}
	return vals, nil
}

// delMany deletes keys: one DEL on a single server, a pipeline of DELs
// (one round trip per node) on a Cluster or a Ring.
func (s *Store) delMany(ctx context.Context, keys []string) error {
	if _, single := s.cfg.Redis.(*redis.Client); single {
		return s.cfg.Redis.Del(ctx, keys...).Err()
	}
	_, err := s.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Del(ctx, k)
		}
		return nil
	})
	return err
}

// Refresh implements sharding.LookupRefresher: it reads ids from the
// cache and from the table, corrects the cached pairs that differ from
// the table (a pair the cache kept while it was unreachable when the
// table's changed), and returns their IDs. The plugin calls it only
// when a statement routed through the lookup returned fewer rows than it
// named IDs, for the IDs its answer may lack. Without a
// cache, or with the cache unreachable (Resolve then reads the table),
// it corrects nothing.
func (s *Store) Refresh(ctx context.Context, ids []int64) ([]int64, error) {
	if s.cfg.Redis == nil || len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.key(id)
	}
	var vals []any
	if !s.cache(ctx, func() (err error) { vals, err = s.getMany(ctx, keys); return err }) {
		return nil, nil
	}
	var rows []row
	if err := s.cfg.DB.WithContext(ctx).Table(s.cfg.Table).Where("order_id IN ?", ids).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("lookup: refresh: %w", err)
	}
	owner := make(map[int64]int64, len(rows))
	for _, r := range rows {
		owner[r.OrderID] = r.UserID
	}
	var stale []int64
	for i, id := range ids {
		cached, _ := vals[i].(string)
		u, known := owner[id]
		switch {
		case known && cached != strconv.FormatInt(u, 10):
			stale = append(stale, id)
		case !known && cached != "" && cached != negative:
			stale = append(stale, id)
		}
	}
	if len(stale) == 0 {
		return nil, nil
	}
	fixed := s.cache(ctx, func() error {
		_, err := s.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range stale {
				if u, ok := owner[id]; ok {
					p.Set(ctx, s.key(id), u, s.cfg.TTL)
				} else {
					p.Del(ctx, s.key(id))
				}
			}
			return nil
		})
		return err
	})
	if !fixed {
		return nil, fmt.Errorf("lookup: refresh: the cache holds %d stale pairs and could not be corrected", len(stale))
	}
	return stale, nil
}

// Delete removes pairs from the table, then from the cache.
func (s *Store) Delete(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.cfg.DB.WithContext(ctx).Table(s.cfg.Table).Where("order_id IN ?", ids).Delete(&row{}).Error; err != nil {
		return fmt.Errorf("lookup: delete: %w", err)
	}
	if s.cfg.Redis != nil {
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = s.key(id)
		}
		s.cache(ctx, func() error { return s.delMany(ctx, keys) })
	}
	return nil
}
