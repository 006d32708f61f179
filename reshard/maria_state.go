package reshard

import (
	"context"
	"database/sql"
	"encoding/json"
)

// The move's state on a MariaDB target: the same two tables as on
// PostgreSQL (state.go), in MariaDB's types. The feed's positions are
// GTID positions ("0-1-57") in start_pos and applied_pos; buckets and the
// last key copied are JSON arrays.

func mariaStateTable(schema string) string { return mtable(schema, "freshread_reshard_state") }
func mariaCopyTable(schema string) string  { return mtable(schema, "freshread_reshard_copy") }

func (mariaEngine) createStateTables(ctx context.Context, db *sql.DB, schema string) error {
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+mariaStateTable(schema)+` (
  move_id VARCHAR(255) NOT NULL PRIMARY KEY,
  source VARCHAR(255) NOT NULL,
  target VARCHAR(255) NOT NULL,
  buckets JSON NOT NULL,
  nbuckets INT NOT NULL,
  phase VARCHAR(32) NOT NULL,
  slot VARCHAR(255) NOT NULL,
  start_pos TEXT NULL,
  applied_pos TEXT NULL,
  map_version BIGINT NOT NULL DEFAULT 0,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+mariaCopyTable(schema)+` (
  move_id VARCHAR(255) NOT NULL,
  tbl VARCHAR(255) NOT NULL,
  last_key JSON NULL,
  `+"`rows`"+` BIGINT NOT NULL DEFAULT 0,
  done BOOLEAN NOT NULL DEFAULT FALSE,
  PRIMARY KEY (move_id, tbl)
) ENGINE=InnoDB`)
	return err
}

func (mariaEngine) readState(ctx context.Context, db *sql.DB, schema, move string) (moveState, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = 'freshread_reshard_state'`, schema).Scan(&n); err != nil {
		return moveState{}, err
	}
	if n == 0 {
		return moveState{}, nil
	}
	return scanState(db.QueryRowContext(ctx, `SELECT phase, source, target, buckets, nbuckets, slot, start_pos, applied_pos, map_version
 FROM `+mariaStateTable(schema)+` WHERE move_id = ?`, move))
}

func (mariaEngine) resetState(ctx context.Context, tx *sql.Tx, schema string, mv Move, nb int, phase, slot string, tables []string) error {
	buckets, err := json.Marshal(mv.Buckets)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+mariaStateTable(schema)+` (move_id, source, target, buckets, nbuckets, phase, slot)
 VALUES (?, ?, ?, ?, ?, ?, ?)
 ON DUPLICATE KEY UPDATE phase = VALUES(phase), start_pos = NULL, applied_pos = NULL, map_version = 0, updated_at = CURRENT_TIMESTAMP(6)`,
		mv.ID, mv.From, mv.To, string(buckets), nb, phase, slot); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+mariaCopyTable(schema)+` WHERE move_id = ?`, mv.ID); err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+mariaCopyTable(schema)+` (move_id, tbl) VALUES (?, ?)`, mv.ID, t); err != nil {
			return err
		}
	}
	return nil
}

func (mariaEngine) setPhase(ctx context.Context, q querier, schema, move, phase string) error {
	_, err := q.ExecContext(ctx, `UPDATE `+mariaStateTable(schema)+` SET phase = ?, updated_at = CURRENT_TIMESTAMP(6) WHERE move_id = ?`, phase, move)
	return err
}

func (mariaEngine) setStart(ctx context.Context, q querier, schema, move, phase, pos string) error {
	_, err := q.ExecContext(ctx, `UPDATE `+mariaStateTable(schema)+` SET phase = ?, start_pos = ?, updated_at = CURRENT_TIMESTAMP(6) WHERE move_id = ?`, phase, pos, move)
	return err
}

func (mariaEngine) setApplied(ctx context.Context, q querier, schema, move, pos string) error {
	_, err := q.ExecContext(ctx, `UPDATE `+mariaStateTable(schema)+` SET applied_pos = ?, updated_at = CURRENT_TIMESTAMP(6) WHERE move_id = ?`, pos, move)
	return err
}

func (mariaEngine) setVersion(ctx context.Context, q querier, schema, move string, v int64) error {
	_, err := q.ExecContext(ctx, `UPDATE `+mariaStateTable(schema)+` SET map_version = ?, updated_at = CURRENT_TIMESTAMP(6) WHERE move_id = ?`, v, move)
	return err
}

func (mariaEngine) copyProgress(ctx context.Context, q querier, schema, move, table string) ([]sql.NullString, int64, bool, error) {
	var (
		lastJSON string
		rows     int64
		done     bool
	)
	err := q.QueryRowContext(ctx, `SELECT COALESCE(last_key, '[]'), `+"`rows`"+`, done FROM `+mariaCopyTable(schema)+` WHERE move_id = ? AND tbl = ?`,
		move, table).Scan(&lastJSON, &rows, &done)
	if err != nil {
		return nil, 0, false, err
	}
	last, err := jsonStrings(lastJSON)
	return last, rows, done, err
}

func (mariaEngine) saveCopyProgress(ctx context.Context, tx *sql.Tx, schema, move, table string, last []sql.NullString, n int, done bool) error {
	var key any // NULL before the first chunk
	if last != nil {
		b, err := json.Marshal(nullStrings(last))
		if err != nil {
			return err
		}
		key = string(b)
	}
	_, err := tx.ExecContext(ctx, `UPDATE `+mariaCopyTable(schema)+` SET last_key = ?, `+"`rows` = `rows`"+` + ?, done = ? WHERE move_id = ? AND tbl = ?`,
		key, n, done, move, table)
	return err
}
