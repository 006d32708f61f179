package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// slotInfo is a logical slot as pg_replication_slots shows it.
type slotInfo struct {
	exists    bool
	confirmed walPos
}

func slotStatus(ctx context.Context, db *sql.DB, slot string) (slotInfo, error) {
	var confirmed sql.NullString
	err := db.QueryRowContext(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, slot).Scan(&confirmed)
	if err == sql.ErrNoRows {
		return slotInfo{}, nil
	}
	if err != nil {
		return slotInfo{}, err
	}
	l, err := scanLSN(confirmed)
	return slotInfo{exists: true, confirmed: l}, err
}

// createSlot creates the move's logical slot with test_decoding and
// returns its consistent point: every transaction that commits after it is
// decoded. It waits for the transactions running on the source to end.
func createSlot(ctx context.Context, db *sql.DB, slot string) (walPos, error) {
	var lsn string
	if err := db.QueryRowContext(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'test_decoding')`, slot).Scan(&lsn); err != nil {
		return 0, err
	}
	return parseLSN(lsn)
}

func dropSlot(ctx context.Context, db *sql.DB, slot string) error {
	return retryBusy(ctx, func() error { return dropSlotOnce(ctx, db, slot) })
}

func dropSlotOnce(ctx context.Context, db *sql.DB, slot string) error {
	_, err := db.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, slot)
	return err
}

// advanceSlot moves the slot's confirmed position forward to lsn (never
// back: PostgreSQL refuses).
func advanceSlot(ctx context.Context, db *sql.DB, slot string, lsn walPos) error {
	return retryBusy(ctx, func() error { return advanceSlotOnce(ctx, db, slot, lsn) })
}

func advanceSlotOnce(ctx context.Context, db *sql.DB, slot string, lsn walPos) error {
	_, err := db.ExecContext(ctx, `SELECT pg_replication_slot_advance(slot_name, $2::pg_lsn) FROM pg_replication_slots
 WHERE slot_name = $1 AND database = current_database() AND confirmed_flush_lsn < $2::pg_lsn`, slot, lsn.String())
	return err
}

// slotBusyWait bounds how long a slot another backend still holds is
// waited for: a backend whose query was cancelled (a context ended)
// releases the slot when it has aborted, shortly after the client saw the
// cancellation.
const slotBusyWait = 10 * time.Second

// retryBusy runs f again while the slot is active in another backend
// (SQLSTATE 55006), for up to slotBusyWait.
func retryBusy(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(slotBusyWait)
	for {
		err := f()
		if err == nil || sqlState(err) != "55006" || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// decodedRow is one row of pg_logical_slot_peek_changes.
type decodedRow struct {
	lsn  walPos
	data string
}

// peek returns up to n changes (whole transactions) the slot holds that
// committed before upto (0: no bound), without consuming them.
func peek(ctx context.Context, db *sql.DB, slot string, upto walPos, n int) (out []decodedRow, err error) {
	err = retryBusy(ctx, func() error {
		out, err = peekOnce(ctx, db, slot, upto, n)
		return err
	})
	return out, err
}

func peekOnce(ctx context.Context, db *sql.DB, slot string, upto walPos, n int) ([]decodedRow, error) {
	var uptoArg any
	if upto != 0 {
		uptoArg = upto.String()
	}
	rows, err := db.QueryContext(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_changes($1, $2::pg_lsn, $3, 'include-xids', '1', 'skip-empty-xacts', '1')`, slot, uptoArg, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []decodedRow
	for rows.Next() {
		var l, data string
		if err := rows.Scan(&l, &data); err != nil {
			return nil, err
		}
		lsn, err := parseLSN(l)
		if err != nil {
			return nil, err
		}
		out = append(out, decodedRow{lsn, data})
	}
	return out, rows.Err()
}

// positions reads the source's WAL insert and flush positions.
func positions(ctx context.Context, db *sql.DB) (insert, flush walPos, err error) {
	var i, f string
	if err := db.QueryRowContext(ctx, `SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text`).Scan(&i, &f); err != nil {
		return 0, 0, fmt.Errorf("reshard: read WAL position: %w", err)
	}
	if insert, err = parseLSN(i); err != nil {
		return 0, 0, err
	}
	flush, err = parseLSN(f)
	return insert, flush, err
}
