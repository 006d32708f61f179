package lookup

import (
	"context"
	"fmt"
	"io"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/sharding"
)

// Source is one shard to read pairs from.
type Source struct {
	// Name is the shard's name, in errors and progress.
	Name string
	// DB is the shard's *gorm.DB (its primary).
	DB *gorm.DB
}

// BackfillConfig configures Backfill.
type BackfillConfig struct {
	// Sources are the shards the pairs are read from, every one.
	Sources   []Source
	Table     string // the sharded table, e.g. "orders"
	IDColumn  string // e.g. "id"
	KeyColumn string // e.g. "user_id"
	Chunk     int    // rows per keyset chunk; default 1000
	// Restart ignores the recorded positions and starts from the beginning.
	Restart bool
	// Progress receives one line per chunk. Optional.
	Progress io.Writer
}

// Backfill copies (ID, key) pairs of every source into the lookup in keyset
// chunks, recording the last ID per source after each chunk, so a second
// run resumes where the first stopped. It returns the number of pairs
// written.
func (s *Store) Backfill(ctx context.Context, cfg BackfillConfig) (int64, error) {
	if cfg.Chunk <= 0 {
		cfg.Chunk = 1000
	}
	if err := s.Migrate(ctx); err != nil {
		return 0, err
	}
	progress := s.cfg.Table + "_backfill"
	var total int64
	for _, src := range cfg.Sources {
		source := src.Name + "/" + cfg.Table
		var state struct {
			LastID int64
			Done   bool
			Rows   int64
		}
		if cfg.Restart {
			s.cfg.DB.WithContext(ctx).Table(progress).Where("source = ?", source).Delete(&struct{}{})
		} else if err := s.cfg.DB.WithContext(ctx).Table(progress).Select("last_id, done, "+s.quote("rows")+" AS "+s.quote("rows")).
			Where("source = ?", source).Limit(1).Scan(&state).Error; err != nil {
			return total, fmt.Errorf("lookup: backfill %s: read progress: %w", source, err)
		}
		if state.Done {
			fmt.Fprintf(orDiscard(cfg.Progress), "%s: done earlier (%d rows), skipped\n", source, state.Rows)
			continue
		}
		start := time.Now()
		for {
			var pairs []struct {
				ID  int64 `gorm:"column:id"`
				Key int64 `gorm:"column:shard_key"` // KEY is reserved on MariaDB and MySQL
			}
			err := src.DB.WithContext(ctx).Table(cfg.Table).
				Select(fmt.Sprintf("%s AS id, %s AS shard_key", quote(src.DB, cfg.IDColumn), quote(src.DB, cfg.KeyColumn))).
				Where(clause.Gt{Column: clause.Column{Name: cfg.IDColumn}, Value: state.LastID}).
				Order(clause.OrderByColumn{Column: clause.Column{Name: cfg.IDColumn}}).
				Limit(cfg.Chunk).Scan(&pairs).Error
			if err != nil {
				return total, fmt.Errorf("lookup: backfill %s: read chunk after %d: %w", source, state.LastID, err)
			}
			if len(pairs) > 0 {
				ps := make([]sharding.Pair, len(pairs))
				for i, p := range pairs {
					ps[i] = sharding.Pair{OrderID: p.ID, UserID: p.Key}
				}
				if err := s.Put(ctx, ps); err != nil {
					return total, fmt.Errorf("lookup: backfill %s: %w", source, err)
				}
				state.LastID = pairs[len(pairs)-1].ID
				state.Rows += int64(len(pairs))
				total += int64(len(pairs))
			}
			done := len(pairs) < cfg.Chunk
			if err := s.cfg.DB.WithContext(ctx).Exec(s.progressUpsert(progress), source, state.LastID, done, state.Rows).Error; err != nil {
				return total, fmt.Errorf("lookup: backfill %s: record progress: %w", source, err)
			}
			fmt.Fprintf(orDiscard(cfg.Progress), "%s: %d rows, last id %d, %.0f rows/s\n", source, state.Rows, state.LastID,
				float64(state.Rows)/max(time.Since(start).Seconds(), 1e-3))
			if done {
				break
			}
			if err := ctx.Err(); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

func quote(db *gorm.DB, name string) string { return db.Statement.Quote(name) }

// progressUpsert records a source's backfill progress in table progress
// (source, last_id, done, rows as arguments).
func (s *Store) progressUpsert(progress string) string {
	rows := s.quote("rows") // ROWS is reserved on MariaDB and MySQL
	q := "INSERT INTO " + s.quote(progress) + " (source, last_id, done, " + rows + ") VALUES (?, ?, ?, ?) "
	if s.postgres() {
		return q + "ON CONFLICT (source) DO UPDATE SET last_id = EXCLUDED.last_id, done = EXCLUDED.done, " + rows + " = EXCLUDED." + rows
	}
	return q + "ON DUPLICATE KEY UPDATE last_id = VALUES(last_id), done = VALUES(done), " + rows + " = VALUES(" + rows + ")"
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
