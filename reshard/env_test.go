package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// nbTest is the number of buckets of the tests' maps.
const nbTest = 8

// schemaSQL is the sharded schema of the tests: orders with many column
// types, order_items with a composite primary key and a foreign key to
// orders (the copy is not one snapshot of both tables: the mover's
// sessions are replication sessions, which do not check it).
const schemaSQL = `
CREATE TABLE orders (
  id bigint PRIMARY KEY,
  user_id bigint NOT NULL,
  status text,
  amount numeric(12,2),
  price double precision,
  attrs jsonb,
  raw json,
  tags text[],
  blob bytea,
  created_at timestamptz,
  local_at timestamp,
  due date,
  span interval,
  flag boolean,
  uid uuid,
  counts int[],
  total numeric GENERATED ALWAYS AS (amount * 2) STORED
);
CREATE INDEX ON orders (user_id);
CREATE TABLE order_items (
  order_id bigint NOT NULL REFERENCES orders (id),
  line int NOT NULL,
  user_id bigint NOT NULL,
  sku text,
  qty int,
  PRIMARY KEY (order_id, line)
);
CREATE INDEX ON order_items (user_id);
`

var testTables = []Table{{Name: "orders", Key: "user_id"}, {Name: "order_items", Key: "user_id"}}

// env is a set of shard databases on the shared cluster and a map store.
type env struct {
	t      *testing.T
	pg     *testcluster.Postgres
	maria  *testcluster.MariaDB
	shards []string
	dbName map[string]string
	db     map[string]*sql.DB
	store  *memStore
	// initial is the map while the store has none (newUnmappedEnv).
	initial []string
}

// newEnvFunc makes an env of one engine's shards: newEnv (PostgreSQL) or
// newMariaEnv. The tests that run on both take one.
type newEnvFunc func(t *testing.T, shards []string, owners []string) *env

// newUnmappedEnv is newEnv with a store that holds no map yet: the
// initial map is Config.InitialMap.
func newUnmappedEnv(t *testing.T, shards []string, initial []string) *env {
	return newUnmappedEnvOn(newEnv, t, shards, initial)
}

// newUnmappedEnvOn is newUnmappedEnv on mk's engine.
func newUnmappedEnvOn(mk newEnvFunc, t *testing.T, shards []string, initial []string) *env {
	e := mk(t, shards, initial)
	e.store.m, e.store.found, e.initial = sharding.BucketMap{}, false, initial
	return e
}

func (e *env) owners() []string {
	if o := e.store.owners(); o != nil {
		return o
	}
	return e.initial
}

// newEnv creates one database per shard with the schema; owners is the
// initial map (published as version 1).
func newEnv(t *testing.T, shards []string, owners []string) *env {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	e := &env{t: t, pg: pg, shards: shards, dbName: map[string]string{}, db: map[string]*sql.DB{}, store: newMemStore(owners)}
	for _, s := range shards {
		name := pg.CreateDatabase(t)
		db, err := sql.Open("pgx", pg.PrimaryDSN(name))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(20)
		t.Cleanup(func() { db.Close() })
		if _, err := db.Exec(schemaSQL); err != nil {
			t.Fatal(err)
		}
		e.dbName[s], e.db[s] = name, db
	}
	// Slots of a test that failed midway would hold WAL; the databases
	// are dropped at the end, and their slots must go first.
	t.Cleanup(func() {
		for _, s := range shards {
			e.db[s].Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active`)
		}
	})
	return e
}

// copiedMove makes the mover of mv with cfg, prepares the move and copies
// its rows; each step must succeed.
func (e *env) copiedMove(cfg Config, mv Move) *Mover {
	e.t.Helper()
	ctx := context.Background()
	m, err := New(cfg, mv)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := m.Prepare(ctx); err != nil {
		e.t.Fatal(err)
	}
	if _, err := m.Copy(ctx); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// copyError makes the mover of mv with cfg, prepares the move (which
// must succeed) and returns the mover and the copy's error.
func (e *env) copyError(cfg Config, mv Move) (*Mover, error) {
	e.t.Helper()
	m, err := New(cfg, mv)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := m.Prepare(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	_, err = m.Copy(context.Background())
	return m, err
}

func (e *env) config() Config {
	c := Config{Tables: testTables, Store: e.store, ChunkRows: 100, PollInterval: 2 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(e.t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for _, s := range e.shards {
		sh := Shard{Name: s, DB: e.db[s]}
		if e.maria != nil {
			sh.BinlogDSN = e.maria.PrimaryDSN(e.dbName[s])
		}
		c.Shards = append(c.Shards, sh)
	}
	return c
}

func evenOwners(shards ...string) []string {
	out := make([]string, nbTest)
	for b := range out {
		out[b] = shards[b*len(shards)/nbTest]
	}
	return out
}

func bucketOf(user int64) int { return int(user % nbTest) }

// ledger is what the writers were told committed: the expected state.
type ledger struct {
	mu     sync.Mutex
	orders map[int64]orderRec
	items  map[[2]int64]itemRec
}

type orderRec struct {
	user    int64
	ver     int
	deleted bool
}

type itemRec struct {
	user    int64
	qty     int
	deleted bool
}

func newLedger() *ledger {
	return &ledger{orders: map[int64]orderRec{}, items: map[[2]int64]itemRec{}}
}

// seed writes n orders (ids from base, users spread over every bucket)
// with one or two items each, straight to their owners.
func (e *env) seed(l *ledger, base int64, n int) {
	e.t.Helper()
	if e.maria != nil {
		e.mariaSeed(l, base, n)
		return
	}
	owners := e.owners()
	byShard := map[string][]int64{}
	for i := 0; i < n; i++ {
		id := base + int64(i)
		user := int64(1 + i%97)
		byShard[owners[bucketOf(user)]] = append(byShard[owners[bucketOf(user)]], id)
		l.orders[id] = orderRec{user: user, ver: 1}
		l.items[[2]int64{id, 1}] = itemRec{user: user, qty: 1}
		if i%2 == 0 {
			l.items[[2]int64{id, 2}] = itemRec{user: user, qty: 1}
		}
	}
	for s, ids := range byShard {
		_, err := e.db[s].Exec(`
INSERT INTO orders (id, user_id, status, amount, price, attrs, raw, tags, blob, created_at, local_at, due, span, flag, uid, counts)
SELECT id, 1 + (id - $2) % 97, 'v1', 1.25, 0.1 * id, jsonb_build_object('v', 1, 'id', id), '{"x": 1,  "x": 2}', ARRAY['a', NULL, 'it''s'], '\x00ff'::bytea || int8send(id),
  '2025-03-01 12:00:00.123456+00'::timestamptz + id * interval '1 second', '2025-03-01 12:00:00.5', date '2025-03-01', interval '1 day 2 hours', id % 2 = 0,
  md5(id::text)::uuid, ARRAY[1, NULL, 3]
FROM unnest($1::int8[]) AS id`, ids, base)
		if err != nil {
			e.t.Fatal(err)
		}
		_, err = e.db[s].Exec(`
INSERT INTO order_items (order_id, line, user_id, sku, qty)
SELECT id, l, 1 + (id - $2) % 97, 'sku-' || id, 1 FROM unnest($1::int8[]) AS id, generate_series(1, 2) AS l WHERE l = 1 OR (id - $2) % 2 = 0`, ids, base)
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// writer is one application process: it routes by its own copy of the
// map, refreshes it every refresh (0: only after FRB01) and acks it, and
// retries a write refused by the guard after refreshing.
type writer struct {
	e       *env
	id      string
	refresh time.Duration
	lease   time.Duration
	l       *ledger
	rng     *rand.Rand
	mine    []int64 // order ids it owns
	nextID  int64

	owners    []string
	version   int64
	refreshed time.Time
	guarded   atomic.Int64 // writes refused with FRB01
	deadlocks atomic.Int64 // MariaDB transactions rolled back by a deadlock, run again
	// installRace is when MariaDB last failed a write with "table
	// freshread_bucket_fence doesn't exist" (isInstallRace), 0 for never.
	installRace atomic.Int64
	ops         atomic.Int64
}

func (e *env) newWriter(l *ledger, n int, refresh, lease time.Duration) *writer {
	w := &writer{e: e, id: fmt.Sprintf("writer-%d", n), refresh: refresh, lease: lease, l: l,
		rng: rand.New(rand.NewPCG(uint64(n), 42)), nextID: int64(n+1) * 1_000_000_000}
	l.mu.Lock()
	for id := range l.orders {
		if id%16 == int64(n) {
			w.mine = append(w.mine, id)
		}
	}
	l.mu.Unlock()
	slices.Sort(w.mine)
	w.reload(context.Background())
	return w
}

func (w *writer) reload(ctx context.Context) {
	m, _, found, _ := w.e.store.Load(ctx)
	if !found {
		m.Owners, m.Version = w.e.initial, 0 // Config.InitialMap
	}
	w.owners, w.version, w.refreshed = m.Owners, m.Version, time.Now()
	w.e.store.Ack(ctx, w.id, w.version, w.lease)
}

// do runs fn on the owner of user's bucket in a transaction, retrying
// after FRB01 with a fresh map. The transaction is not cancelled with ctx
// (only the retries are): a COMMIT interrupted by a cancellation may have
// committed, and the ledger must know.
func (w *writer) do(ctx context.Context, user int64, fn func(tx *sql.Tx) error) error {
	stop := ctx
	ctx = context.WithoutCancel(ctx)
	backoff := time.Millisecond
	for {
		if w.refresh > 0 && time.Since(w.refreshed) > w.refresh {
			w.reload(ctx)
		}
		db := w.e.db[w.owners[bucketOf(user)]]
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			if err = fn(tx); err == nil {
				err = tx.Commit()
			} else {
				tx.Rollback()
			}
		}
		if err == nil {
			w.ops.Add(1)
			return nil
		}
		if isDeadlock(err) {
			// MariaDB rolled the transaction back (InnoDB's deadlocks
			// between writers, or one with the guard's installation): an
			// application runs it again.
			w.deadlocks.Add(1)
			continue
		}
		if isInstallRace(err) {
			// MDEV-26048, while the guard's triggers are created
			// (mariaCreateTriggers): the test checks when it happened.
			w.installRace.Store(time.Now().UnixNano())
			continue
		}
		if sqlState(err) != sharding.GuardSQLState {
			return err
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("bucket %d is ", bucketOf(user))) {
			return fmt.Errorf("guard message does not name bucket %d: %w", bucketOf(user), err)
		}
		w.guarded.Add(1)
		w.reload(ctx)
		select {
		case <-stop.Done():
			return stop.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 32*time.Millisecond)
	}
}

// insert writes a new order (and its item) for user.
func (w *writer) insert(ctx context.Context, user int64) error {
	id := w.nextID
	w.nextID++
	err := w.do(ctx, user, func(tx *sql.Tx) error {
		if _, err := w.e.execTx(ctx, tx, `INSERT INTO orders (id, user_id, status, amount, attrs, tags, created_at) VALUES ($1, $2, 'v1', 1.25, '{"v": 1}', '{x}', now())`,
			`INSERT INTO orders (id, user_id, status, amount, attrs, tags, created_at) VALUES ($1, $2, 'v1', 1.25, '{"v": 1}', 'x', NOW(6))`, id, user); err != nil {
			return err
		}
		_, err := w.e.execTx(ctx, tx, `INSERT INTO order_items (order_id, line, user_id, sku, qty) VALUES ($1, 1, $2, 'new', 1)`, "", id, user)
		return err
	})
	if err != nil {
		return err
	}
	w.l.mu.Lock()
	w.l.orders[id] = orderRec{user: user, ver: 1}
	w.l.items[[2]int64{id, 1}] = itemRec{user: user, qty: 1}
	w.l.mu.Unlock()
	w.mine = append(w.mine, id)
	return nil
}

// step makes one random write and records it once committed.
func (w *writer) step(ctx context.Context) error {
	l := w.l
	r := w.rng.IntN(10)
	if len(w.mine) == 0 || r < 3 {
		return w.insert(ctx, int64(1+w.rng.IntN(97)))
	}
	i := w.rng.IntN(len(w.mine))
	id := w.mine[i]
	l.mu.Lock()
	o := l.orders[id]
	it := l.items[[2]int64{id, 1}]
	l.mu.Unlock()
	switch {
	case r < 8: // update the order and its first item
		err := w.do(ctx, o.user, func(tx *sql.Tx) error {
			if _, err := w.e.execTx(ctx, tx, `UPDATE orders SET status = $2, amount = amount + 1, attrs = jsonb_set(coalesce(attrs, '{}'), '{v}', to_jsonb($3::int)) WHERE id = $1`,
				`UPDATE orders SET status = $2, amount = amount + 1, attrs = JSON_SET(COALESCE(attrs, '{}'), '$.v', $3) WHERE id = $1`, id, fmt.Sprintf("v%d", o.ver+1), o.ver+1); err != nil {
				return err
			}
			if it.deleted || it.user == 0 {
				_, err := w.e.execTx(ctx, tx, `INSERT INTO order_items (order_id, line, user_id, sku, qty) VALUES ($1, 1, $2, 'again', $3)`, "", id, o.user, it.qty+1)
				return err
			}
			_, err := w.e.execTx(ctx, tx, `UPDATE order_items SET qty = $2 WHERE order_id = $1 AND line = 1`, "", id, it.qty+1)
			return err
		})
		if err != nil {
			return err
		}
		l.mu.Lock()
		o.ver++
		l.orders[id] = o
		l.items[[2]int64{id, 1}] = itemRec{user: o.user, qty: it.qty + 1}
		l.mu.Unlock()
	default: // delete the order and its items
		err := w.do(ctx, o.user, func(tx *sql.Tx) error {
			if _, err := w.e.execTx(ctx, tx, `DELETE FROM order_items WHERE order_id = $1`, "", id); err != nil {
				return err
			}
			_, err := w.e.execTx(ctx, tx, `DELETE FROM orders WHERE id = $1`, "", id)
			return err
		})
		if err != nil {
			return err
		}
		l.mu.Lock()
		o.deleted = true
		l.orders[id] = o
		for k, v := range l.items {
			if k[0] == id {
				v.deleted = true
				l.items[k] = v
			}
		}
		l.mu.Unlock()
		w.mine = slices.Delete(w.mine, i, i+1)
	}
	return nil
}

// writers runs n writers until stop is called, which returns their
// first error.
type writers struct {
	ws     []*writer
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

func (e *env) startWriters(l *ledger, n int, pause time.Duration) *writers {
	ctx, cancel := context.WithCancel(context.Background())
	ws := &writers{cancel: cancel}
	for i := 0; i < n; i++ {
		w := e.newWriter(l, i, 50*time.Millisecond, time.Second)
		ws.ws = append(ws.ws, w)
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			for ctx.Err() == nil {
				if err := w.step(ctx); err != nil {
					if ctx.Err() != nil {
						return
					}
					ws.mu.Lock()
					if ws.err == nil {
						ws.err = fmt.Errorf("%s: %w", w.id, err)
					}
					ws.mu.Unlock()
					return
				}
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
	return ws
}

func (ws *writers) stop() error {
	ws.cancel()
	ws.wg.Wait()
	return ws.err
}

func (ws *writers) totals() (ops, guarded int64) {
	for _, w := range ws.ws {
		ops += w.ops.Load()
		guarded += w.guarded.Load()
	}
	return
}

// check compares every shard with the ledger: every row acknowledged is on
// exactly the shard the map says, with the acknowledged values, and no
// other row exists. With oldOwners (before Cleanup), the rows of a moved
// bucket left on its old owner are ignored: copies frozen at the switch.
func (e *env) check(l *ledger, oldOwners []string) {
	e.t.Helper()
	owners := e.owners()
	leftover := func(shard string, user int64) bool {
		b := bucketOf(user)
		return oldOwners != nil && oldOwners[b] == shard && owners[b] != shard
	}
	type seen struct {
		shards []string
		status string
		user   int64
	}
	orders := map[int64]*seen{}
	items := map[[2]int64]*seen{}
	for _, s := range e.shards {
		rows, err := e.db[s].Query(`SELECT id, user_id, status FROM orders`)
		if err != nil {
			e.t.Fatal(err)
		}
		for rows.Next() {
			var id, user int64
			var status string
			if err := rows.Scan(&id, &user, &status); err != nil {
				e.t.Fatal(err)
			}
			if leftover(s, user) {
				continue
			}
			if orders[id] == nil {
				orders[id] = &seen{status: status, user: user}
			}
			orders[id].shards = append(orders[id].shards, s)
		}
		rows.Close()
		rows, err = e.db[s].Query(`SELECT order_id, line, user_id, qty FROM order_items`)
		if err != nil {
			e.t.Fatal(err)
		}
		for rows.Next() {
			var id, user int64
			var line, qty int
			if err := rows.Scan(&id, &line, &user, &qty); err != nil {
				e.t.Fatal(err)
			}
			if leftover(s, user) {
				continue
			}
			k := [2]int64{id, int64(line)}
			if items[k] == nil {
				items[k] = &seen{status: fmt.Sprint(qty), user: user}
			}
			items[k].shards = append(items[k].shards, s)
		}
		rows.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	bad := 0
	fail := func(format string, args ...any) {
		bad++
		if bad <= 20 {
			e.t.Errorf(format, args...)
		}
	}
	placed := func(got []string, user int64) bool { return slices.Equal(got, []string{owners[bucketOf(user)]}) }
	for id, o := range l.orders {
		got := orders[id]
		switch {
		case o.deleted && got != nil:
			fail("order %d (user %d) was deleted, found on %v", id, o.user, got.shards)
		case o.deleted:
		case got == nil:
			fail("order %d (user %d, bucket %d) acknowledged, found nowhere", id, o.user, bucketOf(o.user))
		case !placed(got.shards, o.user):
			fail("order %d (bucket %d, owner %s) on %v", id, bucketOf(o.user), owners[bucketOf(o.user)], got.shards)
		case got.status != fmt.Sprintf("v%d", o.ver):
			fail("order %d: status %s, acknowledged v%d", id, got.status, o.ver)
		}
	}
	for id, got := range orders {
		if _, ok := l.orders[id]; !ok {
			fail("order %d on %v was never acknowledged", id, got.shards)
		}
	}
	for k, it := range l.items {
		got := items[k]
		switch {
		case it.deleted && got != nil:
			fail("item %v was deleted, found on %v", k, got.shards)
		case it.deleted:
		case got == nil:
			fail("item %v (bucket %d) acknowledged, found nowhere", k, bucketOf(it.user))
		case !placed(got.shards, it.user):
			fail("item %v (bucket %d, owner %s) on %v", k, bucketOf(it.user), owners[bucketOf(it.user)], got.shards)
		case got.status != fmt.Sprint(it.qty):
			fail("item %v: qty %s, acknowledged %d", k, got.status, it.qty)
		}
	}
	for k, got := range items {
		if _, ok := l.items[k]; !ok {
			fail("item %v on %v was never acknowledged", k, got.shards)
		}
	}
	if bad > 0 {
		e.t.Fatalf("%d rows misplaced, lost, duplicated or stale", bad)
	}
}

// count returns the number of rows of table in buckets on a shard.
func (e *env) count(shard, table string, buckets []int) int {
	e.t.Helper()
	var n int
	if e.maria != nil {
		in := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(buckets)), ", "), "[]")
		if err := e.db[shard].QueryRow(fmt.Sprintf(`SELECT COUNT(*) FROM %s WHERE (user_id %% %d) IN (%s)`, table, nbTest, in)).Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		return n
	}
	if err := e.db[shard].QueryRow(fmt.Sprintf(`SELECT count(*) FROM %s WHERE (user_id %% %d)::int4 = ANY($1)`, table, nbTest), int32s(buckets)).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) fences(shard string) map[int]string {
	e.t.Helper()
	out := map[int]string{}
	rows, err := e.db[shard].Query(`SELECT bucket, state FROM freshread_bucket_fence`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var b int
		var s string
		rows.Scan(&b, &s)
		out[b] = s
	}
	return out
}

// slots is the number of the move's replication slots on a shard; on
// MariaDB, where the catch-up holds nothing on the source, the binlog
// readers still registered with the server (server ids from 2^30; the
// server sees a reader gone at its next heartbeat, so this waits up to 5
// s for them to go).
func (e *env) slots(shard string) int {
	e.t.Helper()
	var n int
	if e.maria != nil {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			rows, err := e.db[shard].Query(`SHOW SLAVE HOSTS`)
			if err != nil {
				e.t.Fatal(err)
			}
			n = 0
			for rows.Next() {
				cols, _ := rows.Columns()
				vals, err := scanNullStrings(rows, len(cols))
				if err != nil {
					e.t.Fatal(err)
				}
				if id, _ := strconv.ParseInt(vals[0].String, 10, 64); id >= 1<<30 {
					n++
				}
			}
			rows.Close()
			if n == 0 || time.Now().After(deadline) {
				return n
			}
		}
	}
	if err := e.db[shard].QueryRow(`SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// moverExec runs statements in one transaction that passes the guard
// as the mover's do: on PostgreSQL with freshread.mover set, on MariaDB
// in a mover session (@freshread_mover).
func (e *env) moverExec(shard string, stmts ...string) error {
	if e.maria == nil {
		return e.exec(shard, append([]string{`SET LOCAL freshread.mover = 'on'`}, stmts...)...)
	}
	ctx := context.Background()
	return mariaEngine{}.withTx(ctx, e.db[shard], func(tx *sql.Tx) error {
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
}

func isGuard(err error) bool { return err != nil && sqlState(err) == sharding.GuardSQLState }

var _ = errors.Is
