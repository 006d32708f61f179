package reshard

import (
	"context"
	"database/sql"
	"time"
)

// pgEngine is the mover on PostgreSQL shards: logical decoding with the
// built-in test_decoding plugin (pgFeed), PL/pgSQL guard triggers, state
// in tables of Config.Schema.
type pgEngine struct{}

func (pgEngine) name() string          { return "PostgreSQL" }
func (pgEngine) defaultSchema() string { return "public" }

func (pgEngine) withTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	return withTx(ctx, db, fn)
}

func (pgEngine) checkShard(ctx context.Context, sh Shard) (string, error) {
	ok, err := mayReplicate(ctx, sh.DB)
	if err != nil || ok {
		return "", err
	}
	return "reshard: the role may not set session_replication_role: the mover's writes fire the tables' triggers and check their foreign keys (docs/design/sharding-and-moves.md)", nil
}

func (pgEngine) describe(ctx context.Context, db *sql.DB, shard string, t Table) (*tableSide, error) {
	return describe(ctx, db, shard, t)
}

func (pgEngine) ops(mt *movingTable, nb int) tableOps { return &pgOps{mt: mt, sql: buildSQL(mt, nb)} }

func (pgEngine) installGuard(ctx context.Context, db *sql.DB, schema string, tables []*tableSide, nb int) error {
	return installGuard(ctx, db, schema, tables, nb)
}

func (pgEngine) fence(ctx context.Context, tx *sql.Tx, schema string, buckets []int, state, move string) error {
	return fence(ctx, tx, schema, buckets, state, move)
}

func (pgEngine) unfence(ctx context.Context, q querier, schema string, buckets []int, state, move string) error {
	return unfence(ctx, q, schema, buckets, state, move)
}

func (pgEngine) hasFenceTable(ctx context.Context, db *sql.DB, schema string) (bool, error) {
	var reg sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1)::text`, quoteIdent(schema)+".freshread_bucket_fence").Scan(&reg); err != nil {
		return false, err
	}
	return reg.Valid, nil
}

func (pgEngine) tryLock(ctx context.Context, conn *sql.Conn, move string) (bool, error) {
	var ok bool
	err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(hashtext('freshread_reshard'), hashtext($1))`, move).Scan(&ok)
	return ok, err
}

func (pgEngine) unlock(ctx context.Context, conn *sql.Conn, move string) error {
	_, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock(hashtext('freshread_reshard'), hashtext($1))`, move)
	return err
}

func pgStateTable(schema string) string { return quoteIdent(schema) + ".freshread_reshard_state" }
func pgCopyTable(schema string) string  { return quoteIdent(schema) + ".freshread_reshard_copy" }

func (pgEngine) createStateTables(ctx context.Context, db *sql.DB, schema string) error {
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+pgStateTable(schema)+` (
  move_id text PRIMARY KEY,
  source text NOT NULL,
  target text NOT NULL,
  buckets int4[] NOT NULL,
  nbuckets int4 NOT NULL,
  phase text NOT NULL,
  slot text NOT NULL,
  start_lsn pg_lsn,
  applied_lsn pg_lsn,
  map_version int8 NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+pgCopyTable(schema)+` (
  move_id text NOT NULL,
  tbl text NOT NULL,
  last_key text[],
  rows int8 NOT NULL DEFAULT 0,
  done bool NOT NULL DEFAULT false,
  PRIMARY KEY (move_id, tbl)
)`)
	return err
}

func (pgEngine) readState(ctx context.Context, db *sql.DB, schema, move string) (moveState, error) {
	var regclass sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1)::text`, pgStateTable(schema)).Scan(&regclass); err != nil {
		return moveState{}, err
	}
	if !regclass.Valid {
		return moveState{}, nil
	}
	return scanState(db.QueryRowContext(ctx, `SELECT phase, source, target, array_to_json(buckets)::text, nbuckets, slot, start_lsn::text, applied_lsn::text, map_version
 FROM `+pgStateTable(schema)+` WHERE move_id = $1`, move))
}

func (pgEngine) resetState(ctx context.Context, tx *sql.Tx, schema string, mv Move, nb int, phase, slot string, tables []string) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+pgStateTable(schema)+` (move_id, source, target, buckets, nbuckets, phase, slot)
 VALUES ($1, $2, $3, $4, $5, $6, $7)
 ON CONFLICT (move_id) DO UPDATE SET phase = EXCLUDED.phase, start_lsn = NULL, applied_lsn = NULL, map_version = 0, updated_at = now()`,
		mv.ID, mv.From, mv.To, int32s(mv.Buckets), nb, phase, slot); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+pgCopyTable(schema)+` WHERE move_id = $1`, mv.ID); err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+pgCopyTable(schema)+` (move_id, tbl) VALUES ($1, $2)`, mv.ID, t); err != nil {
			return err
		}
	}
	return nil
}

func (pgEngine) setPhase(ctx context.Context, q querier, schema, move, phase string) error {
	_, err := q.ExecContext(ctx, `UPDATE `+pgStateTable(schema)+` SET phase = $2, updated_at = now() WHERE move_id = $1`, move, phase)
	return err
}

func (pgEngine) setStart(ctx context.Context, q querier, schema, move, phase, pos string) error {
	_, err := q.ExecContext(ctx, `UPDATE `+pgStateTable(schema)+` SET phase = $2, start_lsn = $3::pg_lsn, updated_at = now() WHERE move_id = $1`, move, phase, pos)
	return err
}

func (pgEngine) setApplied(ctx context.Context, q querier, schema, move, pos string) error {
	_, err := q.ExecContext(ctx, `UPDATE `+pgStateTable(schema)+` SET applied_lsn = $2::pg_lsn, updated_at = now() WHERE move_id = $1`, move, pos)
	return err
}

func (pgEngine) setVersion(ctx context.Context, q querier, schema, move string, v int64) error {
	_, err := q.ExecContext(ctx, `UPDATE `+pgStateTable(schema)+` SET map_version = $2, updated_at = now() WHERE move_id = $1`, move, v)
	return err
}

func (pgEngine) copyProgress(ctx context.Context, q querier, schema, move, table string) ([]sql.NullString, int64, bool, error) {
	var (
		lastJSON string
		rows     int64
		done     bool
	)
	err := q.QueryRowContext(ctx, `SELECT coalesce(array_to_json(last_key)::text, '[]'), rows, done FROM `+pgCopyTable(schema)+` WHERE move_id = $1 AND tbl = $2`,
		move, table).Scan(&lastJSON, &rows, &done)
	if err != nil {
		return nil, 0, false, err
	}
	last, err := jsonStrings(lastJSON)
	return last, rows, done, err
}

func (pgEngine) saveCopyProgress(ctx context.Context, tx *sql.Tx, schema, move, table string, last []sql.NullString, n int, done bool) error {
	_, err := tx.ExecContext(ctx, `UPDATE `+pgCopyTable(schema)+` SET last_key = $3, rows = rows + $4, done = $5 WHERE move_id = $1 AND tbl = $2`,
		move, table, nullStrings(last), n, done)
	return err
}

func (pgEngine) newFeed(m *Mover) feed { return &pgFeed{m: m} }

func (pgEngine) now(ctx context.Context, db *sql.DB) (time.Time, error) {
	var t time.Time
	err := db.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&t)
	return t, err
}

func (pgEngine) drain(ctx context.Context, cfg Config, src Shard, fencedAt time.Time) error {
	return drain(ctx, cfg, src, fencedAt)
}
