package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	_ "github.com/go-sql-driver/mysql"

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
	allowMariaDB = true
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
	for i := 0; i < n; i++ {
		id := base + int64(i)
		user := int64(1 + i%97)
		db := e.db[owners[bucketOf(user)]]
		_, err := db.Exec(`INSERT INTO orders (id, user_id, status, amount, price, ratio, attrs, tags, blob_col, created_at, stamped, due, span, flag, uid, kind, big)
 VALUES (?, ?, 'v1', 1.25, ? * 0.1, 0.1, JSON_OBJECT('v', 1, 'id', ?), 'a,it''s', UNHEX(CONCAT('00ff', LPAD(HEX(?), 16, '0'))),
 '2025-03-01 12:00:00.123456' + INTERVAL ? SECOND, '2025-03-01 12:00:00.5', '2025-03-01', '26:00:00.250', ? % 2 = 0, UUID(), 'it''s', 18446744073709551615 - ?)`,
			id, user, id, id, id, id, id, id)
		if err != nil {
			e.t.Fatal(err)
		}
		lines := 1
		if i%2 == 0 {
			lines = 2
		}
		for line := 1; line <= lines; line++ {
			if _, err := db.Exec(`INSERT INTO order_items (order_id, line, user_id, sku, qty) VALUES (?, ?, ?, ?, 1)`, id, line, user, fmt.Sprintf("sku-%d", id)); err != nil {
				e.t.Fatal(err)
			}
			l.items[[2]int64{id, int64(line)}] = itemRec{user: user, qty: 1}
		}
		l.orders[id] = orderRec{user: user, ver: 1}
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
