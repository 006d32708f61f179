package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/freshread/freshread/sharding"
)

// BucketCheck is one table's bucket on both sides.
type BucketCheck struct {
	// Table is the table compared.
	Table string
	// Bucket is the bucket compared.
	Bucket int
	// Rows and Sum (the sum of the first 64 bits of the md5 of every
	// row's text, as a decimal) on the source and the target.
	SourceRows, TargetRows int64
	// SourceSum and TargetSum: see SourceRows.
	SourceSum, TargetSum string
}

func (c BucketCheck) String() string {
	return fmt.Sprintf("%s bucket %d: source %d rows (sum %s), target %d rows (sum %s)", c.Table, c.Bucket, c.SourceRows, c.SourceSum, c.TargetRows, c.TargetSum)
}

// VerifyReport compares the moving buckets on the source and the target.
type VerifyReport struct {
	// Move is the move's ID.
	Move string
	// Rows is the number of rows of the moving buckets on the source.
	Rows int64
	// Checked counts the (table, bucket) pairs compared.
	Checked int
	// Mismatches lists the pairs that differ (after the retries of a
	// standalone Verify).
	Mismatches []BucketCheck
	// Duration is how long the verification took.
	Duration time.Duration
}

// OK reports whether every bucket matched.
func (r *VerifyReport) OK() bool { return len(r.Mismatches) == 0 }

func (r *VerifyReport) err() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	for i, c := range r.Mismatches {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(r.Mismatches)-5)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.String())
	}
	return fmt.Errorf("%w: move %s: %s", ErrVerify, r.Move, b.String())
}

type bucketSum struct {
	rows int64
	sum  string
}

// scanSums reads rows of (bucket, row count, checksum as text).
func scanSums(rows *sql.Rows, err error) (map[int]bucketSum, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]bucketSum{}
	for rows.Next() {
		var b int
		var s bucketSum
		if err := rows.Scan(&b, &s.rows, &s.sum); err != nil {
			return nil, err
		}
		out[b] = s
	}
	return out, rows.Err()
}

// sums reads the per-bucket counts and checksums of t on one side.
func (m *Mover) sums(ctx context.Context, t *movingTable, onSource bool, buckets []int) (map[int]bucketSum, error) {
	db := m.dst.DB
	if onSource {
		db = m.src.DB
	}
	var out map[int]bucketSum
	err := m.eng.withTx(ctx, db, func(tx *sql.Tx) error {
		var err error
		out, err = t.ops.sums(ctx, tx, onSource, buckets)
		return err
	})
	return out, err
}

// compare checks buckets of t (nil: all the moving ones) on both sides.
func (m *Mover) compare(ctx context.Context, t *movingTable, buckets []int) (checks []BucketCheck, srcRows int64, err error) {
	if buckets == nil {
		buckets = m.mv.Buckets
	}
	// Both sides at once: they are different servers.
	var (
		src, dst       map[int]bucketSum
		srcErr, dstErr error
		wg             sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		src, srcErr = m.sums(ctx, t, true, buckets)
	}()
	dst, dstErr = m.sums(ctx, t, false, buckets)
	wg.Wait()
	if srcErr != nil {
		return nil, 0, fmt.Errorf("reshard: move %s: verify %s on %s: %w", m.mv.ID, t.cfg.Name, m.src.Name, srcErr)
	}
	if dstErr != nil {
		return nil, 0, fmt.Errorf("reshard: move %s: verify %s on %s: %w", m.mv.ID, t.cfg.Name, m.dst.Name, dstErr)
	}
	for _, b := range buckets {
		s, d := src[b], dst[b]
		if s.sum == "" {
			s.sum = "0"
		}
		if d.sum == "" {
			d.sum = "0"
		}
		srcRows += s.rows
		checks = append(checks, BucketCheck{Table: t.cfg.Name, Bucket: b, SourceRows: s.rows, TargetRows: d.rows, SourceSum: s.sum, TargetSum: d.sum})
	}
	return checks, srcRows, nil
}

// verify compares every table's moving buckets once.
func (m *Mover) verify(ctx context.Context) (*VerifyReport, error) {
	start := time.Now()
	rep := &VerifyReport{Move: m.mv.ID}
	for _, t := range m.tables {
		checks, n, err := m.compare(ctx, t, nil)
		if err != nil {
			return rep, err
		}
		rep.Rows += n
		rep.Checked += len(checks)
		for _, c := range checks {
			if c.SourceRows != c.TargetRows || c.SourceSum != c.TargetSum {
				rep.Mismatches = append(rep.Mismatches, c)
			}
		}
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// Verify compares, per table and moving bucket, the row count and a
// checksum of the rows on the source and the target. With writes still
// flowing the two sides are compared at slightly different moments, so a
// bucket that differs is checked again after a catch-up round, up to
// Config.VerifyRetries times, before it is reported. The switch verifies
// too, with both sides frozen (unless Config.SkipSwitchVerify). It needs
// the copy to be finished and the switch not to have started; with
// mismatches it returns the report and ErrVerify.
func (m *Mover) Verify(ctx context.Context) (*VerifyReport, error) {
	done, err := m.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	st, err := m.readState(ctx)
	if err != nil {
		return nil, err
	}
	if !st.exists || st.phase != sharding.MoveCatchingUp {
		return nil, fmt.Errorf("%w: move %s is %q: verify after the copy, before the switch", ErrPhase, m.mv.ID, st.phase)
	}
	if err := m.feed.resume(ctx); err != nil {
		return nil, err
	}
	if _, err := m.feed.round(ctx); err != nil {
		return nil, err
	}
	rep, err := m.verify(ctx)
	if err != nil {
		return rep, err
	}
	start := time.Now().Add(-rep.Duration)
	for try := 0; try < m.cfg.VerifyRetries && !rep.OK(); try++ {
		if _, err := m.feed.round(ctx); err != nil {
			return rep, err
		}
		var still []BucketCheck
		for _, t := range m.tables {
			var buckets []int
			for _, c := range rep.Mismatches {
				if c.Table == t.cfg.Name {
					buckets = append(buckets, c.Bucket)
				}
			}
			if len(buckets) == 0 {
				continue
			}
			slices.Sort(buckets)
			checks, _, err := m.compare(ctx, t, buckets)
			if err != nil {
				return rep, err
			}
			for _, c := range checks {
				if c.SourceRows != c.TargetRows || c.SourceSum != c.TargetSum {
					still = append(still, c)
				}
			}
		}
		rep.Mismatches = still
	}
	rep.Duration = time.Since(start)
	return rep, rep.err()
}
