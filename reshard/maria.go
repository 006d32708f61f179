package reshard

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// mariaEngine is the mover on MariaDB shards (10.11; MySQL 8 is not
// written: docs/design/sharding-and-moves.md, "MariaDB (in progress)",
// says what differs).
//
// The guard is a BEFORE INSERT, UPDATE and DELETE trigger per table that
// looks the row's bucket up in the fence table and refuses a fenced one
// with SIGNAL SQLSTATE 'FRB01' (MySQL error 1644, ER_SIGNAL_EXCEPTION),
// unless the session's user variable @freshread_mover is 'on': the
// mover's sessions set it (mariaSession) and reset it before the
// connection goes back to the pool.
type mariaEngine struct{}

func (mariaEngine) name() string { return "MariaDB" }

// defaultSchema is "": the mover's tables are in each shard's current
// database (the DSN's).
func (mariaEngine) defaultSchema() string { return "" }

// engineOf returns the engine of db by its driver: go-sql-driver/mysql
// is MariaDB (or MySQL), anything else PostgreSQL. The driver is told by
// its type's package, so that a mover on PostgreSQL links no MySQL code.
func engineOf(db *sql.DB) engine {
	if db != nil && isMySQLDriver(db.Driver()) {
		return mariaEngine{}
	}
	return pgEngine{}
}

// isMySQLDriver reports whether d is go-sql-driver/mysql's driver.
func isMySQLDriver(d any) bool {
	t := reflect.TypeOf(d)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && t.PkgPath() == "github.com/go-sql-driver/mysql"
}

// mquote quotes a MariaDB identifier.
func mquote(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// mtable is a table of the mover's in schema ("": the current database).
func mtable(schema, name string) string {
	if schema == "" {
		return mquote(name)
	}
	return mquote(schema) + "." + mquote(name)
}

// placeholders is "?, ?, ..." (n).
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// anys converts ints to query arguments.
func anys(bs []int) []any {
	out := make([]any, len(bs))
	for i, b := range bs {
		out[i] = b
	}
	return out
}

// The mover's session: its writes pass the guard (@freshread_mover), it
// does not check foreign keys (the copy reads the tables one after the
// other, so an item may arrive before its order; the catch-up brings the
// order), and TIMESTAMP values cross as UTC text. The session's own
// values are saved first and put back after.
const (
	mariaMoverSQL = `SET @freshread_fk = @@SESSION.foreign_key_checks, @freshread_tz = @@SESSION.time_zone,
 @freshread_mover = 'on', SESSION foreign_key_checks = 0, SESSION time_zone = '+00:00'`
	mariaRestoreSQL = `SET SESSION foreign_key_checks = @freshread_fk, SESSION time_zone = @freshread_tz,
 @freshread_mover = NULL, @freshread_fk = NULL, @freshread_tz = NULL`
)

// mariaRestoreTimeout bounds setting a connection back.
const mariaRestoreTimeout = 5 * time.Second

// mariaSession runs fn on a connection of db set up as the mover's
// session, and sets the connection back after: one that cannot be set
// back (a cancelled context, a broken connection) is discarded, never
// returned to the pool with the guard's exemption on.
func mariaSession(ctx context.Context, db *sql.DB, fn func(conn *sql.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, mariaMoverSQL); err != nil {
		discardConn(conn)
		return err
	}
	ferr := fn(conn)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mariaRestoreTimeout)
	defer cancel()
	if _, err := conn.ExecContext(rctx, mariaRestoreSQL); err != nil {
		discardConn(conn)
	}
	return ferr
}

// discardConn makes the pool close conn instead of keeping it.
func discardConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}

// withTx runs fn in a mover transaction, READ COMMITTED: its locking
// reads and writes lock the rows they find, not the gaps around them
// (REPEATABLE READ's next-key locks), so they hold back the
// application's writes of other buckets on the same shard as little as
// possible. The catch-up's reads of the source are consistent snapshots
// (mariaSnapshot), not these.
func (mariaEngine) withTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	return mariaSession(ctx, db, func(conn *sql.Conn) error {
		tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// checkShard refuses a MySQL server: the mover reads the binlog position
// of its copy's snapshot from MariaDB's binlog_snapshot_* status, which
// MySQL does not have (docs/design/sharding-and-moves.md, "Not written
// yet").
func (mariaEngine) checkShard(ctx context.Context, sh Shard) (string, error) {
	var version string
	if err := sh.DB.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", fmt.Errorf("read the server's version: %w", err)
	}
	if !isMariaDB(version) {
		return "", fmt.Errorf("%w: the server is MySQL %s; moving buckets between MySQL shards is not supported (MariaDB 10.11 or later is)", ErrConfig, version)
	}
	return "", nil
}

// isMariaDB reports whether a server's VERSION() is MariaDB's
// ("10.11.6-MariaDB-0+deb12u1-log"), not MySQL's ("8.4.3").
func isMariaDB(version string) bool { return strings.Contains(version, "MariaDB") }

// mariaGenerated matches information_schema.COLUMNS.EXTRA of a generated
// column (MySQL 8 also says DEFAULT_GENERATED of a default expression,
// which is an ordinary column).
var mariaGenerated = regexp.MustCompile(`(?i)\b(VIRTUAL|STORED|PERSISTENT) GENERATED\b`)

// describe reads t from db's information_schema. Table.Name is "name"
// (in the connection's database) or "database.name".
func (mariaEngine) describe(ctx context.Context, db *sql.DB, shard string, t Table) (*tableSide, error) {
	schema, name, qualified := strings.Cut(t.Name, ".")
	if !qualified {
		schema, name = "", t.Name
	}
	var (
		nsp, tname, ttype string
		eng               sql.NullString
	)
	err := db.QueryRowContext(ctx, `SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, ENGINE FROM information_schema.TABLES
 WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`, schema, name).Scan(&nsp, &tname, &ttype, &eng)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("%w: table %q does not exist on shard %s", ErrSchema, t.Name, shard)
	}
	if err != nil {
		return nil, fmt.Errorf("reshard: shard %s: describe %s: %w", shard, t.Name, err)
	}
	if ttype != "BASE TABLE" {
		return nil, fmt.Errorf("%w: %s on shard %s is not a table (%s)", ErrSchema, t.Name, shard, ttype)
	}
	if !strings.EqualFold(eng.String, "InnoDB") {
		return nil, fmt.Errorf("%w: %s on shard %s is an %s table, not InnoDB (the mover needs transactions and consistent snapshots)", ErrSchema, t.Name, shard, eng.String)
	}
	ts := &tableSide{rel: relName{nsp, tname}, qname: mquote(nsp) + "." + mquote(tname)}
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, ORDINAL_POSITION, EXTRA FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, nsp, tname)
	if err != nil {
		return nil, fmt.Errorf("reshard: shard %s: columns of %s: %w", shard, t.Name, err)
	}
	for rows.Next() {
		var (
			c     column
			pos   int
			extra string
		)
		if err := rows.Scan(&c.name, &c.typ, &c.base, &pos, &extra); err != nil {
			rows.Close()
			return nil, err
		}
		c.pos = pos - 1
		ts.ncols = max(ts.ncols, pos)
		if mariaGenerated.MatchString(extra) {
			continue
		}
		ts.cols = append(ts.cols, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	err = ts.readPrimaryKey(ctx, db, shard, t, `SELECT COLUMN_NAME FROM information_schema.STATISTICS
 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX`, nsp, tname)
	if err != nil {
		return nil, err
	}
	key, ok := ts.col(t.Key)
	if !ok {
		return nil, fmt.Errorf("%w: %s on shard %s has no column %s", ErrSchema, t.Name, shard, t.Key)
	}
	if !slices.Contains([]string{"tinyint", "smallint", "mediumint", "int", "bigint"}, strings.ToLower(key.base)) {
		return nil, fmt.Errorf("%w: %s on shard %s: key column %s is %s, want an integer", ErrSchema, t.Name, shard, t.Key, key.typ)
	}
	ts.key = key
	return ts, nil
}

func (mariaEngine) ops(mt *movingTable, nb int) tableOps { return &mariaOps{mt: mt, nb: nb} }

// fenceTable is the fence table in schema.
func mariaFenceTable(schema string) string { return mtable(schema, "freshread_bucket_fence") }

// mariaGuardName is the name of a table's guard trigger for op (ins, upd,
// del): trigger names are per database, so it names the table, and stays
// within 64 characters.
func mariaGuardName(rel relName, op string) string { return guardFunction(rel) + "_" + op }

// mariaGuardMessage is the text of the guard's error, cut to 128
// characters (MySQL's limit of MESSAGE_TEXT).
func mariaGuardMessage(table, bucket string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '\'' || r == '\\' || r < ' ' {
			return '?'
		}
		return r
	}, table)
	return fmt.Sprintf(`LEFT(CONCAT('freshread: %s: bucket ', %s, ' is ', st, ' on this shard (move ', mid, '): write refused'), 128)`, safe, bucket)
}

// mariaGuardBody is the body of a table's guard trigger for op. Without a
// fence on the row's bucket it costs one primary-key lookup in the
// (small) fence table; MAX over it always returns one row, so no row
// found raises no "no data" warning.
func mariaGuardBody(schema string, rel relName, key string, nb int, op string) string {
	k := mquote(key)
	check := func(row string) string {
		b := fmt.Sprintf("(%s.%s %% %d)", row, k, nb)
		return fmt.Sprintf(`    SELECT MAX(state), MAX(move_id) INTO st, mid FROM %s WHERE bucket = %s;
    IF st IS NOT NULL THEN
      SET msg = %s;
      SIGNAL SQLSTATE 'FRB01' SET MESSAGE_TEXT = msg;
    END IF;
`, mariaFenceTable(schema), b, mariaGuardMessage(rel.name, b))
	}
	var body string
	switch op {
	case "ins":
		body = check("NEW")
	case "upd":
		body = check("NEW") + fmt.Sprintf("    IF NOT (OLD.%s <=> NEW.%s) THEN\n", k, k) + check("OLD") + "    END IF;\n"
	case "del":
		body = check("OLD")
	}
	return `BEGIN
  DECLARE st VARCHAR(16);
  DECLARE mid VARCHAR(255);
  DECLARE msg VARCHAR(128);
  IF COALESCE(@freshread_mover, '') <> 'on' THEN
` + body + `  END IF;
END`
}

var mariaGuardOps = []struct{ op, event string }{{"ins", "INSERT"}, {"upd", "UPDATE"}, {"del", "DELETE"}}

// installGuard creates the fence table and the three guard triggers of
// every table on one shard; a trigger whose body is not the one wanted
// (another number of buckets, an older version) is replaced.
func (mariaEngine) installGuard(ctx context.Context, db *sql.DB, schema string, tables []*tableSide, nb int) error {
	if schema == "" {
		if err := db.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&schema); err != nil {
			return err
		}
		if schema == "" {
			return fmt.Errorf("%w: the connection has no database: name one in the DSN or set Config.Schema", ErrConfig)
		}
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+mariaFenceTable(schema)+` (
  bucket INT NOT NULL PRIMARY KEY,
  state VARCHAR(16) NOT NULL,
  move_id VARCHAR(255) NOT NULL,
  CONSTRAINT freshread_fence_state CHECK (state IN ('incoming', 'moved'))
) ENGINE=InnoDB`); err != nil {
		return err
	}
	for _, t := range tables {
		var missing []int
		for i, g := range mariaGuardOps {
			var have string
			err := db.QueryRowContext(ctx, `SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS
 WHERE TRIGGER_SCHEMA = ? AND TRIGGER_NAME = ? AND EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? AND ACTION_TIMING = 'BEFORE' AND EVENT_MANIPULATION = ?`,
				t.rel.schema, mariaGuardName(t.rel, g.op), t.rel.schema, t.rel.name, g.event).Scan(&have)
			if err != nil && err != sql.ErrNoRows {
				return err
			}
			if err != nil || have != mariaGuardBody(schema, t.rel, t.key.name, nb, g.op) {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if err := mariaCreateTriggers(ctx, db, schema, t, nb, missing); err != nil {
			return fmt.Errorf("guard triggers of %s: %w", t.qname, err)
		}
	}
	return nil
}

// mariaCreateTriggers creates (or replaces) the guard triggers ops of t
// while holding t's write lock (LOCK TABLES, as pt-online-schema-change
// changes triggers). MariaDB 10.11 can fail an application's statement
// on the table that runs while a trigger is created with "table doesn't
// exist" for a table the trigger reads (error 1146, here the fence table:
// MDEV-26048, open); under the lock the application's statements wait
// instead, which makes it rare, not impossible. An application
// transaction that holds another table's lock and waits for this one can
// also be chosen as a deadlock's victim (error 1213), which MariaDB
// applications retry. Both only while the triggers are created, once per
// shard (and when the number of buckets changes).
func mariaCreateTriggers(ctx context.Context, db *sql.DB, schema string, t *tableSide, nb int, ops []int) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `LOCK TABLES `+t.qname+` WRITE`); err != nil {
		return err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mariaRestoreTimeout)
		defer cancel()
		if _, err := conn.ExecContext(uctx, `UNLOCK TABLES`); err != nil {
			discardConn(conn)
		}
	}()
	for _, i := range ops {
		g := mariaGuardOps[i]
		if _, err := conn.ExecContext(ctx, `CREATE OR REPLACE TRIGGER `+mquote(t.rel.schema)+"."+mquote(mariaGuardName(t.rel, g.op))+
			` BEFORE `+g.event+` ON `+t.qname+` FOR EACH ROW `+mariaGuardBody(schema, t.rel, t.key.name, nb, g.op)); err != nil {
			return err
		}
	}
	return nil
}

func (mariaEngine) fence(ctx context.Context, tx *sql.Tx, schema string, buckets []int, state, move string) error {
	ft := mariaFenceTable(schema)
	var other sql.NullString
	args := append(anys(buckets), move)
	err := tx.QueryRowContext(ctx, `SELECT GROUP_CONCAT(CONCAT(bucket, ' (', move_id, ')') ORDER BY bucket SEPARATOR ', ') FROM `+ft+`
 WHERE bucket IN (`+placeholders(len(buckets))+`) AND move_id <> ? AND state = 'incoming'`, args...).Scan(&other)
	if err != nil {
		return err
	}
	if other.Valid {
		return fmt.Errorf("%w: buckets fenced by another move: %s", ErrBusy, other.String)
	}
	values := make([]string, len(buckets))
	args = args[:0]
	for i, b := range buckets {
		values[i] = "(?, ?, ?)"
		args = append(args, b, state, move)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO `+ft+` (bucket, state, move_id) VALUES `+strings.Join(values, ", ")+`
 ON DUPLICATE KEY UPDATE state = VALUES(state), move_id = VALUES(move_id)`, args...)
	return err
}

func (mariaEngine) unfence(ctx context.Context, q querier, schema string, buckets []int, state, move string) error {
	_, err := q.ExecContext(ctx, `DELETE FROM `+mariaFenceTable(schema)+` WHERE bucket IN (`+placeholders(len(buckets))+`) AND state = ? AND move_id = ?`,
		append(anys(buckets), state, move)...)
	return err
}

func (mariaEngine) hasFenceTable(ctx context.Context, db *sql.DB, schema string) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = 'freshread_bucket_fence'`, schema).Scan(&n)
	return n > 0, err
}

// mariaLockName is the move's lock name (at most 64 characters).
func mariaLockName(move string) string {
	h := sha256.Sum256([]byte(move))
	return "freshread_reshard_" + hex.EncodeToString(h[:12])
}

func (mariaEngine) tryLock(ctx context.Context, conn *sql.Conn, move string) (bool, error) {
	var got sql.NullInt64
	err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, mariaLockName(move)).Scan(&got)
	return got.Valid && got.Int64 == 1, err
}

func (mariaEngine) unlock(ctx context.Context, conn *sql.Conn, move string) error {
	_, err := conn.ExecContext(ctx, `SELECT RELEASE_LOCK(?)`, mariaLockName(move))
	return err
}

// now is the server's clock, as Unix time (no time zone crosses).
func (mariaEngine) now(ctx context.Context, db *sql.DB) (time.Time, error) {
	var s string
	if err := db.QueryRowContext(ctx, `SELECT CAST(UNIX_TIMESTAMP(NOW(6)) AS CHAR)`).Scan(&s); err != nil {
		return time.Time{}, err
	}
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("reshard: server time %q: %w", s, err)
	}
	var ns int64
	if frac != "" {
		f := (frac + "000000000")[:9]
		if ns, err = strconv.ParseInt(f, 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("reshard: server time %q: %w", s, err)
		}
	}
	return time.Unix(n, ns), nil
}

func (mariaEngine) newFeed(m *Mover) feed { return &mariaFeed{m: m} }
