package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/freshread/freshread/internal/engines"
)

// mariaFeed is the catch-up on MariaDB: a binlog reader
// (go-mysql-org/go-mysql's replication package, as a replica with a
// server id of its own) from a GTID position.
//
// The start position is taken at Prepare with the copy's consistent
// snapshot: START TRANSACTION WITH CONSISTENT SNAPSHOT, then the
// session's binlog_snapshot_file and binlog_snapshot_position, which
// MariaDB takes under the same lock as the snapshot (every transaction
// before that binlog position is visible in it, none after), turned into
// a GTID position by BINLOG_GTID_POS. Every transaction committed after
// it is in the binlog after it; every one before is visible to the copy,
// whose chunks read later.
//
// A round reads @@gtid_binlog_pos (every transaction the source has
// committed, and more: a transaction is in the binlog before its commit
// in InnoDB is visible) and reads the binlog until it has passed that
// position, keeping the primary keys of the moving tables' rows that
// changed. A batch (Config.ApplyChanges changes, and the rest at the end
// of a round) is applied once its transactions are visible: in a
// consistent snapshot whose binlog position is at or past the batch's
// last transaction (else the snapshot is dropped and taken again a little
// later), the mover reads the changed rows as they are now, and on the
// target, in one transaction, writes them (upserts the rows in a moving
// bucket, deletes the others) and records the GTID position after the
// batch in freshread_reshard_state.applied_pos. A crash before that
// commit leaves the target and its position as they were; the next
// reader starts from that position: nothing applied twice, nothing lost.
type mariaFeed struct {
	m *Mover

	stream engines.BinlogStream
	// read is the position up to which transactions were read from the
	// stream, and file the binlog file the stream is in.
	read gtidPos
	file string
}

// transaction is one binlog transaction's changes of the moving tables.
type mariaTxn struct {
	gtid       engines.BinlogGTID
	standalone bool // DDL or a non-transactional statement: ends with its query
	keys       []map[string][]string
	truncated  []bool
	changes    int64
}

// mariaBatch is transactions applied together.
type mariaBatch struct {
	keys      []map[string][]string // per table: joined key -> key values
	truncated []bool
	changes   int64
	txns      []string     // the GTIDs of the transactions that changed a moving table
	end       binlogCoord  // the end of the batch's last transaction
	pos       gtidPos      // the position after it
	started   bool         // it holds a transaction
	tables    map[int]bool // tables written
}

func newMariaBatch(n int) *mariaBatch {
	return &mariaBatch{keys: make([]map[string][]string, n), truncated: make([]bool, n), tables: map[int]bool{}}
}

func (f *mariaFeed) create(ctx context.Context, fresh bool) (string, error) {
	m := f.m
	if err := f.checkSettings(ctx); err != nil {
		return "", err
	}
	var pos sql.NullString
	err := mariaSnapshot(ctx, m.src.DB, func(conn *sql.Conn, at binlogCoord) error {
		return conn.QueryRowContext(ctx, `SELECT BINLOG_GTID_POS(?, ?)`, at.file, at.pos).Scan(&pos)
	})
	if err != nil {
		return "", fmt.Errorf("reshard: move %s: the binlog position of a snapshot of %s: %w", m.mv.ID, m.src.Name, err)
	}
	if !pos.Valid {
		return "", fmt.Errorf("reshard: move %s: %s has no GTID position for its snapshot's binlog position", m.mv.ID, m.src.Name)
	}
	if _, err := parseGTIDPos(pos.String); err != nil {
		return "", err
	}
	if err := m.at("prepare:slot"); err != nil {
		return "", err
	}
	return pos.String, nil
}

// mariaSnapshot runs fn in a consistent snapshot of db (a mover session),
// with the binlog position the snapshot corresponds to, and ends the
// transaction; a connection where it cannot be ended is discarded.
func mariaSnapshot(ctx context.Context, db *sql.DB, fn func(conn *sql.Conn, at binlogCoord) error) error {
	return mariaSession(ctx, db, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, `START TRANSACTION WITH CONSISTENT SNAPSHOT`); err != nil {
			return err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mariaRestoreTimeout)
			defer cancel()
			if _, err := conn.ExecContext(rctx, `ROLLBACK`); err != nil {
				discardConn(conn)
			}
		}()
		var at binlogCoord
		rows, err := conn.QueryContext(ctx, `SHOW STATUS LIKE 'binlog_snapshot_%'`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var name, value string
			if err := rows.Scan(&name, &value); err != nil {
				rows.Close()
				return err
			}
			switch strings.ToLower(name) {
			case "binlog_snapshot_file":
				at.file = value
			case "binlog_snapshot_position":
				if at.pos, err = strconv.ParseUint(value, 10, 64); err != nil {
					rows.Close()
					return fmt.Errorf("binlog_snapshot_position %q: %w", value, err)
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if at.file == "" {
			return fmt.Errorf("%w: the server shows no binlog_snapshot_file (the binlog must be on: log_bin)", ErrConfig)
		}
		return fn(conn, at)
	})
}

// checkSettings checks that the source writes a row-based binlog.
func (f *mariaFeed) checkSettings(ctx context.Context) error {
	m := f.m
	var logBin int
	var format string
	if err := m.src.DB.QueryRowContext(ctx, `SELECT @@log_bin, @@binlog_format`).Scan(&logBin, &format); err != nil {
		return fmt.Errorf("reshard: move %s: binlog settings of %s: %w", m.mv.ID, m.src.Name, err)
	}
	if logBin != 1 || !strings.EqualFold(format, "ROW") {
		return fmt.Errorf("%w: %s must write a row-based binlog (log_bin on, binlog_format ROW; it has log_bin %d, binlog_format %s)", ErrConfig, m.src.Name, logBin, format)
	}
	if m.src.BinlogDSN == "" {
		return fmt.Errorf("%w: shard %s has no BinlogDSN (the binlog reader's connection)", ErrConfig, m.src.Name)
	}
	return nil
}

// check fails with ErrSlotLost when the binlogs the move still needs
// were purged: the first binlog file's Gtid_list (the position before
// it) is past the position the target recorded.
func (f *mariaFeed) check(ctx context.Context) error {
	m := f.m
	if err := f.checkSettings(ctx); err != nil {
		return err
	}
	from, err := f.from(ctx)
	if err != nil {
		return err
	}
	first, err := firstBinlogState(ctx, m.src.DB)
	if err != nil {
		return fmt.Errorf("reshard: move %s: the binlogs of %s: %w", m.mv.ID, m.src.Name, err)
	}
	if !from.covers(first) {
		return fmt.Errorf("%w: the binlogs of %s begin after %s (at %s): they were purged before the move read them (move %s): roll the move back and start again",
			ErrSlotLost, m.src.Name, from, first, m.mv.ID)
	}
	return nil
}

// from is the position the feed resumes from: the applied one, or the
// start.
func (f *mariaFeed) from(ctx context.Context) (gtidPos, error) {
	st, err := f.m.readState(ctx)
	if err != nil {
		return nil, err
	}
	if !st.exists || st.startPos == "" {
		return nil, fmt.Errorf("%w: move %s has no binlog start position", ErrPhase, f.m.mv.ID)
	}
	p := st.startPos
	if st.appliedPos != "" {
		p = st.appliedPos
	}
	return parseGTIDPos(p)
}

var gtidListRE = regexp.MustCompile(`\[([0-9, -]*)\]`)

// firstBinlogState is the GTID position before the oldest binlog file
// (its Gtid_list event).
func firstBinlogState(ctx context.Context, db *sql.DB) (gtidPos, error) {
	var file string
	rows, err := db.QueryContext(ctx, `SHOW BINARY LOGS`)
	if err != nil {
		return nil, err
	}
	if rows.Next() {
		cols, _ := rows.Columns()
		dest := make([]any, len(cols))
		for i := range dest {
			dest[i] = new(sql.RawBytes)
		}
		dest[0] = &file
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return nil, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if file == "" {
		return nil, fmt.Errorf("no binlog file")
	}
	rows, err = db.QueryContext(ctx, `SHOW BINLOG EVENTS IN '`+strings.ReplaceAll(file, "'", "")+`' LIMIT 4`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals, err := scanNullStrings(rows, len(cols))
		if err != nil {
			return nil, err
		}
		var typ, info string
		for i, c := range cols {
			switch strings.ToLower(c) {
			case "event_type":
				typ = vals[i].String
			case "info":
				info = vals[i].String
			}
		}
		if typ == "Gtid_list" {
			sub := gtidListRE.FindStringSubmatch(info)
			if sub == nil {
				return nil, fmt.Errorf("Gtid_list event %q", info)
			}
			return parseGTIDPos(sub[1])
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no Gtid_list event at the start of %s", file)
}

// resume checks the binlogs and makes the next read start from the
// position the target recorded.
func (f *mariaFeed) resume(ctx context.Context) error {
	if err := f.check(ctx); err != nil {
		return err
	}
	f.close()
	return nil
}

func (f *mariaFeed) drop(context.Context) error {
	f.close()
	return nil
}

func (f *mariaFeed) close() {
	if f.stream != nil {
		f.stream.Close()
	}
	f.stream, f.read, f.file = nil, nil, ""
}

// open starts reading the binlog after the position the target
// recorded.
func (f *mariaFeed) open(ctx context.Context) error {
	if f.stream != nil {
		return nil
	}
	m := f.m
	from, err := f.from(ctx)
	if err != nil {
		return err
	}
	bl := engines.MariaDBBinlog
	if bl == nil {
		return engines.MariaDBBinlogNotLinked("reshard", ErrConfig)
	}
	stream, err := bl.Open(engines.BinlogConfig{
		DSN: m.src.BinlogDSN,
		// A server id no real replica has (they are small numbers).
		ServerID: uint32(1<<30 + rand.IntN(1<<30)),
		GTIDSet:  from.String(),
		Logger:   m.cfg.Logger,
	})
	if errors.Is(err, engines.ErrBinlogDSN) {
		return fmt.Errorf("%w: shard %s: BinlogDSN: %v", ErrConfig, m.src.Name, err)
	}
	if err != nil {
		return fmt.Errorf("reshard: move %s: read the binlog of %s from %s: %w", m.mv.ID, m.src.Name, from, err)
	}
	f.stream, f.read = stream, from
	return nil
}

// position reads the source's binlog position: GTIDs and coordinates.
func binlogPosition(ctx context.Context, db *sql.DB) (gtidPos, binlogCoord, error) {
	var pos string
	if err := db.QueryRowContext(ctx, `SELECT @@gtid_binlog_pos`).Scan(&pos); err != nil {
		return nil, binlogCoord{}, err
	}
	g, err := parseGTIDPos(pos)
	if err != nil {
		return nil, binlogCoord{}, err
	}
	rows, err := db.QueryContext(ctx, `SHOW MASTER STATUS`)
	if err != nil {
		return nil, binlogCoord{}, err
	}
	defer rows.Close()
	var at binlogCoord
	if rows.Next() {
		cols, _ := rows.Columns()
		dest := make([]any, len(cols))
		for i := range dest {
			dest[i] = new(sql.RawBytes)
		}
		dest[0], dest[1] = &at.file, &at.pos
		if err := rows.Scan(dest...); err != nil {
			return nil, binlogCoord{}, err
		}
	}
	return g, at, rows.Err()
}

func (f *mariaFeed) round(ctx context.Context) (roundResult, error) {
	r := roundResult{at: time.Now()}
	barrier, at, err := binlogPosition(ctx, f.m.src.DB)
	if err != nil {
		return r, fmt.Errorf("reshard: move %s: read the binlog position of %s: %w", f.m.mv.ID, f.m.src.Name, err)
	}
	r.reached = at.packed()
	r.changes, r.rows, err = f.applyUntil(ctx, barrier)
	r.took = time.Since(r.at)
	return r, err
}

func (f *mariaFeed) last(ctx context.Context) (int64, error) {
	barrier, _, err := binlogPosition(ctx, f.m.src.DB)
	if err != nil {
		return 0, fmt.Errorf("reshard: move %s: read the binlog position of %s: %w", f.m.mv.ID, f.m.src.Name, err)
	}
	n, _, err := f.applyUntil(ctx, barrier)
	return n, err
}

func (f *mariaFeed) lagBytes(ctx context.Context, r roundResult) (int64, error) {
	_, at, err := binlogPosition(ctx, f.m.src.DB)
	if err != nil {
		return 0, err
	}
	return bytesAfter(r.reached, at), nil
}

// tableOf is the moving table a binlog event's table is, or -1.
func (f *mariaFeed) tableOf(schema, name []byte) int {
	for i, t := range f.m.tables {
		if t.src.rel.schema == string(schema) && t.src.rel.name == string(name) {
			return i
		}
	}
	return -1
}

// truncateRE matches a TRUNCATE statement and its table.
var truncateRE = regexp.MustCompile("(?is)^\\s*TRUNCATE\\s+(?:TABLE\\s+)?(?:`([^`]+)`|([A-Za-z0-9_$]+))(?:\\s*\\.\\s*(?:`([^`]+)`|([A-Za-z0-9_$]+)))?\\s*;?\\s*$")

// truncated is the moving table a TRUNCATE statement empties, or -1.
func (f *mariaFeed) truncated(schema, query []byte) int {
	sub := truncateRE.FindSubmatch(query)
	if sub == nil {
		return -1
	}
	first, second := string(sub[1])+string(sub[2]), string(sub[3])+string(sub[4])
	if second == "" {
		return f.tableOf(schema, []byte(first))
	}
	return f.tableOf([]byte(first), []byte(second))
}

// rowKey is the primary key of a row image of t as text; ok false when
// the image lacks a key column (a minimal image's after-image of an
// update that did not change the key).
func rowKey(t *movingTable, row []any) (vals []string, ok bool, err error) {
	vals = make([]string, len(t.src.pk))
	for i, c := range t.src.pk {
		if c.pos >= len(row) || row[c.pos] == nil {
			return nil, false, nil
		}
		if vals[i], err = binlogText(row[c.pos], c); err != nil {
			return nil, false, err
		}
	}
	return vals, true, nil
}

// binlogText is the text of a value go-mysql decoded for column c.
// Without binlog_row_metadata=FULL it decodes unsigned integers as
// signed: the column's type puts them right.
func binlogText(v any, c column) (string, error) {
	unsigned := strings.Contains(strings.ToLower(c.typ), "unsigned")
	fix := func(x int64, bits uint) string {
		if unsigned && x < 0 {
			return strconv.FormatUint(uint64(x)+(1<<bits), 10)
		}
		return strconv.FormatInt(x, 10)
	}
	switch x := v.(type) {
	case int8:
		return fix(int64(x), 8), nil
	case int16:
		return fix(int64(x), 16), nil
	case int32:
		if strings.EqualFold(c.base, "mediumint") {
			return fix(int64(x), 24), nil
		}
		return fix(int64(x), 32), nil
	case int64:
		if unsigned && x < 0 {
			return strconv.FormatUint(uint64(x), 10), nil
		}
		return strconv.FormatInt(x, 10), nil
	case uint8, uint16, uint32, uint64, int, uint:
		return fmt.Sprint(x), nil
	case string:
		return x, nil
	case []byte:
		return string(x), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 64), nil // as mariaText
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case fmt.Stringer: // decimal.Decimal
		return x.String(), nil
	}
	return "", fmt.Errorf("%w: column %s: a binlog value of type %T", ErrDecode, c.name, v)
}

// addRows keeps the keys of a rows event's rows in txn.
func (f *mariaFeed) addRows(txn *mariaTxn, ti int, e *engines.BinlogRows) error {
	t := f.m.tables[ti]
	if int(e.ColumnCount) != t.src.ncols {
		return fmt.Errorf("%w: %s: the binlog has %d columns, the table %d (a change of the table during the move, or virtual columns the binlog leaves out)", ErrDecode, t.cfg.Name, e.ColumnCount, t.src.ncols)
	}
	add := func(row []any, what string) (bool, error) {
		vals, ok, err := rowKey(t, row)
		if err != nil || !ok {
			return ok, err
		}
		if txn.keys[ti] == nil {
			txn.keys[ti] = map[string][]string{}
		}
		txn.keys[ti][strings.Join(vals, "\x00")] = vals
		return true, nil
	}
	switch e.Kind {
	case engines.BinlogRowsInsert, engines.BinlogRowsDelete:
		for _, row := range e.Rows {
			ok, err := add(row, "row")
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: %s: a row without its primary key in the binlog", ErrDecode, t.cfg.Name)
			}
			txn.changes++
		}
	case engines.BinlogRowsUpdate:
		for i := 0; i+1 < len(e.Rows); i += 2 {
			ok, err := add(e.Rows[i], "old row")
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: %s: an update without the old primary key in the binlog", ErrDecode, t.cfg.Name)
			}
			if _, err := add(e.Rows[i+1], "new row"); err != nil {
				return err
			}
			txn.changes++
		}
	default:
		return fmt.Errorf("%w: %s: a rows event of unknown kind", ErrDecode, t.cfg.Name)
	}
	return nil
}

// applyUntil reads the binlog until every transaction up to barrier was
// read, applying the changes in batches, and returns the changes and
// rows applied.
func (f *mariaFeed) applyUntil(ctx context.Context, barrier gtidPos) (changes, rows int64, err error) {
	m := f.m
	if err := f.open(ctx); err != nil {
		return 0, 0, err
	}
	n := len(m.tables)
	b := newMariaBatch(n)
	var txn *mariaTxn
	flush := func() error {
		if !b.started {
			return nil
		}
		r, err := f.apply(ctx, b)
		rows += r
		if err != nil {
			return err
		}
		changes += b.changes
		b = newMariaBatch(n)
		return m.at("apply:committed")
	}
	for !f.read.covers(barrier) {
		ev, err := f.stream.Next(ctx)
		if err != nil {
			f.close()
			if isPurged(err) {
				return changes, rows, fmt.Errorf("%w: %s (move %s): %v", ErrSlotLost, m.src.Name, m.mv.ID, err)
			}
			return changes, rows, fmt.Errorf("reshard: move %s: read the binlog of %s: %w", m.mv.ID, m.src.Name, err)
		}
		end := false
		switch {
		case ev.Rotate != "":
			f.file = ev.Rotate
		case ev.GTID != nil:
			txn = &mariaTxn{gtid: *ev.GTID, standalone: ev.GTID.Standalone, keys: make([]map[string][]string, n), truncated: make([]bool, n)}
		case ev.Rows != nil:
			e := ev.Rows
			if txn == nil {
				return changes, rows, fmt.Errorf("%w: rows of %s.%s outside a transaction", ErrDecode, e.Schema, e.Table)
			}
			if ti := f.tableOf(e.Schema, e.Table); ti >= 0 {
				if err := f.addRows(txn, ti, e); err != nil {
					return changes, rows, err
				}
			}
		case ev.XID:
			end = txn != nil
		case ev.Query != nil:
			e := ev.Query
			if txn == nil {
				break
			}
			q := strings.TrimSpace(string(e.Query))
			switch {
			case txn.standalone:
				if ti := f.truncated(e.Schema, e.Query); ti >= 0 {
					txn.truncated[ti] = true
					txn.changes++
				}
				end = true
			case strings.EqualFold(q, "COMMIT"):
				end = true
			}
		}
		if !end {
			continue
		}
		b.add(txn, binlogCoord{f.file, uint64(ev.LogPos)})
		f.read[txn.gtid.Domain] = gtid{txn.gtid.Server, txn.gtid.Seq}
		b.pos = f.read.clone()
		txn = nil
		if b.changes >= int64(m.cfg.ApplyChanges) {
			if err := flush(); err != nil {
				return changes, rows, err
			}
		}
	}
	return changes, rows, flush()
}

// isPurged reports whether err is the server's "the position is not in
// any binlog" (ER_MASTER_FATAL_ERROR_READING_BINLOG, 1236).
func isPurged(err error) bool {
	return engines.MariaDBBinlog != nil && engines.MariaDBBinlog.Purged(err)
}

// add puts a read transaction in the batch.
func (b *mariaBatch) add(txn *mariaTxn, end binlogCoord) {
	b.started, b.end = true, end
	if txn.changes == 0 {
		return
	}
	b.changes += txn.changes
	b.txns = append(b.txns, fmt.Sprintf("%d-%d-%d", txn.gtid.Domain, txn.gtid.Server, txn.gtid.Seq))
	for i, ks := range txn.keys {
		if len(ks) > 0 {
			b.tables[i] = true
			if b.keys[i] == nil {
				b.keys[i] = map[string][]string{}
			}
			for k, v := range ks {
				b.keys[i][k] = v
			}
		}
		if txn.truncated[i] {
			b.truncated[i], b.tables[i] = true, true
		}
	}
}

// apply applies a batch: the changed rows read, once the batch's
// transactions are visible, in a snapshot of the source, and written to
// the target with the position after the batch in one transaction.
// It returns the rows re-read.
func (f *mariaFeed) apply(ctx context.Context, b *mariaBatch) (int64, error) {
	m := f.m
	type changed struct{ moving, gone [][]*string }
	got := make([]changed, len(m.tables))
	var rows int64
	if len(b.txns) > 0 {
		err := f.awaitVisible(ctx, b.end, func(conn *sql.Conn) error {
			rows = 0
			for i, t := range m.tables {
				keys := make([][]string, 0, len(b.keys[i]))
				for _, k := range b.keys[i] {
					keys = append(keys, k)
				}
				slices.SortFunc(keys, func(x, y []string) int { return strings.Compare(strings.Join(x, "\x00"), strings.Join(y, "\x00")) })
				moving, gone, err := m.readChanged(ctx, conn, t, keys)
				if err != nil {
					return fmt.Errorf("%s: %w", t.cfg.Name, err)
				}
				got[i] = changed{moving, gone}
				rows += int64(len(keys))
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("reshard: move %s: read the changed rows from %s: %w", m.mv.ID, m.src.Name, err)
		}
	}
	if err := m.at("apply:read"); err != nil {
		return rows, err
	}
	err := m.eng.withTx(ctx, m.dst.DB, func(tx *sql.Tx) error {
		for i, t := range slices.Backward(m.tables) {
			if b.truncated[i] {
				if err := t.ops.(*mariaOps).deleteBuckets(ctx, tx, m.mv.Buckets); err != nil {
					return fmt.Errorf("apply a TRUNCATE of %s: %w", t.cfg.Name, err)
				}
			}
		}
		for i, t := range m.tables {
			if err := m.writeChanged(ctx, tx, t, got[i].moving, got[i].gone); err != nil {
				return fmt.Errorf("apply changes of %s: %w", t.cfg.Name, err)
			}
		}
		return m.eng.setApplied(ctx, tx, m.cfg.Schema, m.mv.ID, b.pos.String())
	})
	if err != nil {
		return rows, fmt.Errorf("reshard: move %s: apply to %s: %w", m.mv.ID, m.dst.Name, err)
	}
	var written []string
	for i, t := range m.tables {
		if b.tables[i] {
			written = append(written, t.cfg.Name)
		}
	}
	if len(written) > 0 {
		m.recordWrite(ctx, written...)
	}
	for _, g := range b.txns {
		if err := m.at("apply:txn " + g); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// awaitVisible runs read in a consistent snapshot of the source that sees
// every transaction up to end in the binlog, taking snapshots until one
// does (a transaction is in the binlog a moment before its commit is
// visible), looking again after Config.PollInterval, then less and less
// often.
func (f *mariaFeed) awaitVisible(ctx context.Context, end binlogCoord, read func(conn *sql.Conn) error) error {
	interval := f.m.cfg.PollInterval
	for {
		seen := false
		var at binlogCoord
		err := mariaSnapshot(ctx, f.m.src.DB, func(conn *sql.Conn, snap binlogCoord) error {
			at = snap
			before, err := snap.before(end)
			if err != nil || before {
				return err
			}
			seen = true
			return read(conn)
		})
		if err != nil || seen {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the source's snapshots stay at %s, before the changes read (to %s): %w", at, end, ctx.Err())
		case <-time.After(interval):
		}
		interval = min(2*interval, max(interval, maxAwaitInterval))
	}
}

// scanNullStrings scans the current row's n columns as text.
func scanNullStrings(rows *sql.Rows, n int) ([]sql.NullString, error) {
	vals := make([]sql.NullString, n)
	dest := make([]any, n)
	for i := range vals {
		dest[i] = &vals[i]
	}
	return vals, rows.Scan(dest...)
}
