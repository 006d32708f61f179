package sharding

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLMapStore keeps the shared bucket map in a PostgreSQL database (the
// lookup database, say), opened with the pgx driver:
//
//	freshread_shard_map(version bigint primary key, map jsonb, published_at)
//	    one row per published version, never updated
//	freshread_shard_moves(id text primary key, status jsonb, caught_up_at, updated_at)
//	    the shared status of each move (package reshard writes it)
//	freshread_shard_map_clients(id text primary key, version bigint, lease_ms bigint, seen_at)
//	    the version each process routes with, and when it said so
//
// PostgreSQL rather than Redis: the map must survive anything the
// processes do not notice. A Redis restarted without its data (or that
// evicted the key) would hold no map, and a process that took that for
// "nothing published" would go back to Config's map, routing the moved
// buckets to their old shards. In PostgreSQL a published version is
// committed and replicated like the orders, and Publish is a
// compare-and-set in a transaction. Times (caught-up ages, client ages)
// are computed by the database's clock, so the processes' clocks do not
// matter.
type SQLMapStore struct{ db *sql.DB }

var _ MapStore = (*SQLMapStore)(nil)

// NewSQLMapStore returns a map store on db (a PostgreSQL database). Call
// EnsureSchema once to create its tables.
func NewSQLMapStore(db *sql.DB) *SQLMapStore { return &SQLMapStore{db: db} }

// EnsureSchema creates the store's tables if they do not exist.
func (s *SQLMapStore) EnsureSchema(ctx context.Context) error {
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS freshread_shard_map (
			version bigint PRIMARY KEY,
			map jsonb NOT NULL,
			published_at timestamptz DEFAULT now())`,
		`CREATE TABLE IF NOT EXISTS freshread_shard_moves (
			id text PRIMARY KEY,
			status jsonb,
			caught_up_at timestamptz,
			updated_at timestamptz)`,
		`CREATE TABLE IF NOT EXISTS freshread_shard_map_clients (
			id text PRIMARY KEY,
			version bigint,
			lease_ms bigint,
			seen_at timestamptz)`,
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sharding: create the map store's tables: %w", err)
		}
	}
	return nil
}

// loadSQL reads the newest map and the moves not done in one statement
// (every process runs it every MapRefresh): always one row, whose version
// and map are NULL when none was published. A move's age is now() minus
// its caught_up_at in microseconds, -1 when it never caught up.
const loadSQL = `
SELECT m.version, m.map,
       (SELECT coalesce(json_agg(json_build_object(
                   'status', mv.status,
                   'age_us', CASE WHEN mv.caught_up_at IS NULL THEN -1
                                  ELSE greatest(0, (extract(epoch FROM now() - mv.caught_up_at) * 1000000)::bigint) END)
                 ORDER BY mv.id), '[]'::json)
          FROM freshread_shard_moves mv
         WHERE coalesce(mv.status->>'phase', '') NOT IN ('done', 'rolled-back'))
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (SELECT version, map FROM freshread_shard_map ORDER BY version DESC LIMIT 1) m ON true`

// Load implements MapStore in one round trip.
func (s *SQLMapStore) Load(ctx context.Context) (BucketMap, []MoveStatus, bool, error) {
	var (
		version       sql.NullInt64
		mapJSON, mvJS []byte
	)
	if err := s.db.QueryRowContext(ctx, loadSQL).Scan(&version, &mapJSON, &mvJS); err != nil {
		return BucketMap{}, nil, false, fmt.Errorf("sharding: load the bucket map: %w", err)
	}
	var moves []MoveStatus
	var rows []struct {
		Status MoveStatus `json:"status"`
		AgeUS  int64      `json:"age_us"`
	}
	if err := json.Unmarshal(mvJS, &rows); err != nil {
		return BucketMap{}, nil, false, fmt.Errorf("sharding: decode the moves: %w", err)
	}
	for _, r := range rows {
		st := r.Status
		st.CaughtUpAge = -1
		if r.AgeUS >= 0 {
			st.CaughtUpAge = time.Duration(r.AgeUS) * time.Microsecond
		}
		moves = append(moves, st)
	}
	if !version.Valid {
		return BucketMap{}, moves, false, nil
	}
	var m BucketMap
	if err := json.Unmarshal(mapJSON, &m); err != nil {
		return BucketMap{}, nil, false, fmt.Errorf("sharding: decode bucket map version %d: %w", version.Int64, err)
	}
	m.Version = version.Int64
	return m, moves, true, nil
}

// Publish implements MapStore: in one transaction it locks the newest
// version's row, checks that it is prev (and that the bucket count is
// unchanged) and inserts prev+1; two publishers of the first version both
// find no row to lock, and the primary key refuses the second one. A
// lost race is ErrMapConflict.
func (s *SQLMapStore) Publish(ctx context.Context, prev int64, m BucketMap) (int64, error) {
	if err := checkPublishable(m); err != nil {
		return 0, err
	}
	m = m.Clone()
	m.Version = prev + 1
	body, err := json.Marshal(m)
	if err != nil {
		return 0, fmt.Errorf("sharding: encode the bucket map: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sharding: publish the bucket map: %w", err)
	}
	defer tx.Rollback()
	var (
		head    int64
		buckets int
	)
	err = tx.QueryRowContext(ctx, `SELECT version, jsonb_array_length(map->'owners') FROM freshread_shard_map ORDER BY version DESC LIMIT 1 FOR UPDATE`).Scan(&head, &buckets)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		head = 0
	case err != nil:
		return 0, fmt.Errorf("sharding: publish the bucket map: %w", err)
	}
	if head != prev {
		return 0, fmt.Errorf("%w: publish over version %d, the store holds version %d", ErrMapConflict, prev, head)
	}
	if head > 0 && buckets != len(m.Owners) {
		return 0, fmt.Errorf("%w: the map has %d buckets, version %d has %d (the bucket count never changes)", ErrConfig, len(m.Owners), head, buckets)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO freshread_shard_map (version, map) VALUES ($1, $2::jsonb)`, prev+1, string(body)); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return 0, fmt.Errorf("%w: version %d was published concurrently", ErrMapConflict, prev+1)
		}
		return 0, fmt.Errorf("sharding: publish the bucket map: %w", err)
	}
	if err := tx.Commit(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return 0, fmt.Errorf("%w: version %d was published concurrently", ErrMapConflict, prev+1)
		}
		return 0, fmt.Errorf("sharding: publish the bucket map: %w", err)
	}
	return prev + 1, nil
}

// checkPublishable refuses a map no process could route with.
func checkPublishable(m BucketMap) error {
	if len(m.Owners) == 0 || len(m.Owners) > MaxBuckets {
		return fmt.Errorf("%w: a bucket map of %d buckets (want 1..%d)", ErrConfig, len(m.Owners), MaxBuckets)
	}
	for b, n := range m.Owners {
		if n == "" {
			return fmt.Errorf("%w: bucket %d has no owner", ErrConfig, b)
		}
	}
	for u, n := range m.HotUsers {
		if n == "" {
			return fmt.Errorf("%w: hot user %d has no shard", ErrConfig, u)
		}
	}
	return nil
}

// SaveMove implements MapStore.
func (s *SQLMapStore) SaveMove(ctx context.Context, st MoveStatus, caughtUp time.Duration) error {
	if st.ID == "" {
		return fmt.Errorf("%w: a move without ID", ErrConfig)
	}
	body, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("sharding: encode move %q: %w", st.ID, err)
	}
	_, err = s.db.ExecContext(ctx, `
INSERT INTO freshread_shard_moves (id, status, caught_up_at, updated_at)
VALUES ($1, $2::jsonb, CASE WHEN $3::bigint >= 0 THEN now() - $3::bigint * interval '1 microsecond' END, now())
ON CONFLICT (id) DO UPDATE SET
    status = excluded.status,
    caught_up_at = CASE WHEN $3::bigint >= 0 THEN now() - $3::bigint * interval '1 microsecond'
        WHEN excluded.status->>'phase' IN ('planned', 'copying', 'rolled-back') THEN NULL -- a new attempt
        ELSE freshread_shard_moves.caught_up_at END,
    updated_at = now()`, st.ID, string(body), agoMicros(caughtUp))
	if err != nil {
		return fmt.Errorf("sharding: save move %q: %w", st.ID, err)
	}
	return nil
}

// Ack implements MapStore; seen_at is the database's now().
func (s *SQLMapStore) Ack(ctx context.Context, client string, v int64, lease time.Duration) error {
	_, err := s.db.ExecContext(ctx, `
INSERT INTO freshread_shard_map_clients (id, version, lease_ms, seen_at) VALUES ($1, $2, $3, now())
ON CONFLICT (id) DO UPDATE SET version = excluded.version, lease_ms = excluded.lease_ms, seen_at = excluded.seen_at`,
		client, v, lease.Milliseconds())
	if err != nil {
		return fmt.Errorf("sharding: acknowledge bucket map version %d: %w", v, err)
	}
	return nil
}

// Clients implements MapStore; Age is measured by the database's clock.
func (s *SQLMapStore) Clients(ctx context.Context) ([]MapClient, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT id, version, lease_ms, (extract(epoch FROM now() - seen_at) * 1000000)::bigint
  FROM freshread_shard_map_clients ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("sharding: list the map clients: %w", err)
	}
	defer rows.Close()
	var out []MapClient
	for rows.Next() {
		var (
			c            MapClient
			leaseMS, age int64
		)
		if err := rows.Scan(&c.ID, &c.Version, &leaseMS, &age); err != nil {
			return nil, fmt.Errorf("sharding: list the map clients: %w", err)
		}
		c.Lease = time.Duration(leaseMS) * time.Millisecond
		c.Age = time.Duration(age) * time.Microsecond
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sharding: list the map clients: %w", err)
	}
	return out, nil
}

// agoMicros is SaveMove's caughtUp in microseconds, -1 for NotCaughtUp
// (any negative duration).
func agoMicros(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Microseconds()
}
