package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// mariaSchemaSQL is the sharded schema of the MariaDB tests, the
// PostgreSQL tests' (schemaSQL) in MariaDB's types.
var mariaSchemaSQL = []string{`
CREATE TABLE orders (
  id BIGINT NOT NULL PRIMARY KEY,
  user_id BIGINT NOT NULL,
  status VARCHAR(64),
  amount DECIMAL(12,2),
  price DOUBLE,
  ratio FLOAT,
  attrs JSON,
  tags TEXT,
  blob_col BLOB,
  created_at DATETIME(6),
  stamped TIMESTAMP(6) NULL DEFAULT NULL,
  due DATE,
  span TIME(3),
  flag BOOLEAN,
  uid CHAR(36) CHARACTER SET ascii,
  kind ENUM('a', 'b', 'it''s'),
  big BIGINT UNSIGNED,
  total DECIMAL(13,2) AS (amount * 2) STORED,
  KEY (user_id)
) ENGINE=InnoDB`, `
CREATE TABLE order_items (
  order_id BIGINT NOT NULL,
  line INT NOT NULL,
  user_id BIGINT NOT NULL,
  sku VARCHAR(64),
  qty INT,
  PRIMARY KEY (order_id, line),
  KEY (user_id),
  FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE=InnoDB`}

// newMariaEnv is newEnv on MariaDB: one database per shard on the shared
// MariaDB primary, with the schema; owners is the initial map.
func newMariaEnv(t *testing.T, shards []string, owners []string) *env {
	t.Helper()
	m := testcluster.MariaDBFor(t)
	e := &env{t: t, maria: m, shards: shards, dbName: map[string]string{}, db: map[string]*sql.DB{}, store: newMemStore(owners)}
	for _, s := range shards {
		name := m.CreateDatabase(t)
		db, err := sql.Open("mysql", m.PrimaryDSN(name))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(20)
		t.Cleanup(func() { db.Close() })
		for _, stmt := range mariaSchemaSQL {
			if _, err := db.Exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
		e.dbName[s], e.db[s] = name, db
	}
	return e
}

// mariaSeed writes n orders (ids from base, users spread over every
// bucket) with one or two items each, straight to their owners, and
// records them in l.
func (e *env) mariaSeed(l *ledger, base int64, n int) {
	e.t.Helper()
	owners := e.owners()
	const batch = 200
	type pending struct {
		orders, items []string
		oargs, iargs  []any
	}
	byShard := map[string]*pending{}
	flush := func(shard string) {
		p := byShard[shard]
		if p == nil || len(p.orders) == 0 {
			return
		}
		db := e.db[shard]
		if _, err := db.Exec(`INSERT INTO orders (id, user_id, status, amount, price, ratio, attrs, tags, blob_col, created_at, stamped, due, span, flag, uid, kind, big)
 VALUES `+strings.Join(p.orders, ", "), p.oargs...); err != nil {
			e.t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO order_items (order_id, line, user_id, sku, qty) VALUES `+strings.Join(p.items, ", "), p.iargs...); err != nil {
			e.t.Fatal(err)
		}
		byShard[shard] = &pending{}
	}
	for i := 0; i < n; i++ {
		id := base + int64(i)
		user := int64(1 + i%97)
		shard := owners[bucketOf(user)]
		p := byShard[shard]
		if p == nil {
			p = &pending{}
			byShard[shard] = p
		}
		p.orders = append(p.orders, `(?, ?, 'v1', 1.25, ? * 0.1, 0.1, JSON_OBJECT('v', 1, 'id', ?), 'a,it''s', UNHEX(CONCAT('00ff', LPAD(HEX(?), 16, '0'))),
 '2025-03-01 12:00:00.123456' + INTERVAL ? SECOND, '2025-03-01 12:00:00.5', '2025-03-01', '26:00:00.250', ? % 2 = 0, UUID(), 'it''s', 18446744073709551615 - ?)`)
		p.oargs = append(p.oargs, id, user, id, id, id, id, id, id)
		lines := 1
		if i%2 == 0 {
			lines = 2
		}
		for line := 1; line <= lines; line++ {
			p.items = append(p.items, "(?, ?, ?, ?, 1)")
			p.iargs = append(p.iargs, id, line, user, fmt.Sprintf("sku-%d", id))
			l.items[[2]int64{id, int64(line)}] = itemRec{user: user, qty: 1}
		}
		l.orders[id] = orderRec{user: user, ver: 1}
		if len(p.orders) == batch {
			flush(shard)
		}
	}
	for shard := range byShard {
		flush(shard)
	}
}

// mariaExec runs statements in one application transaction on a shard
// (no mover session: the guard applies).
func (e *env) mariaExec(shard string, stmts ...string) error {
	ctx := context.Background()
	tx, err := e.db[shard].BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

var dollarParam = regexp.MustCompile(`\$(\d+)`)

// execTx runs a statement of the tests in tx: pg on PostgreSQL; on
// MariaDB maria, or pg when maria is "", with its $n turned into ? and
// the arguments put in their order.
func (e *env) execTx(ctx context.Context, tx *sql.Tx, pg, maria string, args ...any) (sql.Result, error) {
	if e.maria == nil {
		return tx.ExecContext(ctx, pg, args...)
	}
	if maria == "" {
		maria = pg
	}
	var ordered []any
	q := dollarParam.ReplaceAllStringFunc(maria, func(p string) string {
		n, _ := strconv.Atoi(p[1:])
		ordered = append(ordered, args[n-1])
		return "?"
	})
	res, err := tx.ExecContext(ctx, q, ordered...)
	if err != nil {
		return res, fmt.Errorf("%s: %w", q, err)
	}
	return res, nil
}

// isDeadlock reports whether err is MariaDB's deadlock (1213) or lock
// wait timeout (1205), after which InnoDB rolled the transaction (1213)
// or the statement (1205; the writer's transaction is then rolled back
// by its caller) back.
func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// isInstallRace reports whether err is MariaDB's "table
// freshread_bucket_fence doesn't exist" (1146), which MDEV-26048 makes a
// statement fail with while the guard's triggers are created.
func isInstallRace(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146 && strings.Contains(me.Message, "freshread_bucket_fence")
}

// installRaces checks that the writers met MDEV-26048 only before
// installed, and returns how many did.
func (ws *writers) installRaces(t *testing.T, installed time.Time) int {
	t.Helper()
	n := 0
	for _, w := range ws.ws {
		at := w.installRace.Load()
		if at == 0 {
			continue
		}
		n++
		if at > installed.UnixNano() {
			t.Errorf("%s: MariaDB refused a write with \"freshread_bucket_fence doesn't exist\" %v after the guard was installed", w.id, time.Unix(0, at).Sub(installed))
		}
	}
	return n
}
