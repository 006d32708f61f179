package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lookup"
	"github.com/freshread/freshread/sharding"
)

// The differential test: one seeded random workload of writes of every
// shape (Create, Save, Updates, Update, Delete, raw INSERT/UPDATE/DELETE,
// upserts, shard-key changes, transactions committed and rolled back,
// savepoints) and reads (by user, by order ID, scattered and merged) runs
// against four shards and against one reference database holding every
// row. Each operation must give the reference's answer, or a clear
// refusal (refusals) after which nothing was written; the reference runs
// only what the sharded side accepted. After each step every row is
// compared: the shards' rows, read directly, each on its user's shard and
// no ID on two shards, equal the reference's.
//
// FRESHREAD_DIFF_SEED replays a seed; FRESHREAD_DIFF_STEPS sets the
// number of steps (default 300); FRESHREAD_DIFF_KEEPGOING=1 logs every
// discrepancy, puts the shards back to the reference's rows and goes on
// (a survey), instead of failing at the first.

// refusals are the errors that count as a clear refusal.
var refusals = []error{
	sharding.ErrCrossShard, sharding.ErrNoShardKey, sharding.ErrShardKeyChange, sharding.ErrIDInUse,
	sharding.ErrUnsupportedStatement, sharding.ErrScatterUnsupported,
}

func isRefusal(err error) bool {
	for _, r := range refusals {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// errDiffRollback makes a workload transaction roll back.
var errDiffRollback = errors.New("diff: roll back")

// diffSide is one side of the comparison: the sharded database (s set)
// or the reference (s nil).
type diffSide struct {
	db *gorm.DB
	s  *sharding.Sharding
}

// forUser is the session a transaction over u's rows begins on: the
// user's shard, or the reference itself.
func (d diffSide) forUser(u int64) *gorm.DB {
	if d.s == nil {
		return d.db
	}
	return d.s.ForUser(d.db, u)
}

// diffOp is one operation of the workload.
type diffOp struct {
	shape string // the kind of statement (counts)
	desc  string // with its values (logs)
	write bool
	// sorted: a read whose answer has no defined order (raw scatter read);
	// compared sorted.
	run func(d diffSide) (any, int64, error)
}

// diffEnv is a sharded cluster and its reference database.
type diffEnv struct {
	t        *testing.T
	engine   string // "postgres" or "mariadb"
	db       *gorm.DB
	s        *sharding.Sharding
	ref      *gorm.DB
	direct   map[string]*gorm.DB
	names    []string
	ldb      *gorm.DB // the lookup's table
	rdb      redis.UniversalClient
	prefix   string // the lookup's cache keys
	users    []int64
	rng      *rand.Rand
	ids      map[int64]bool // every order ID the workload used
	nextItem int64
}

func diffSeed(t *testing.T) int64 {
	if v := os.Getenv("FRESHREAD_DIFF_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("FRESHREAD_DIFF_SEED=%q: %v", v, err)
		}
		return n
	}
	return time.Now().UnixNano()
}

func diffSteps(t *testing.T) int {
	if v := os.Getenv("FRESHREAD_DIFF_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FRESHREAD_DIFF_STEPS=%q: want a positive number", v)
		}
		return n
	}
	return 300
}

// diffIDs is an ID generator leasing its worker ID on rdb (a short lease:
// a new generator waits one before minting).
func diffIDs(t *testing.T, rdb redis.UniversalClient, prefix string) *sharding.IDGenerator {
	t.Helper()
	g, err := sharding.NewIDGenerator(context.Background(), sharding.IDConfig{Redis: rdb, Prefix: prefix, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func diffRedis(t *testing.T) redis.UniversalClient {
	t.Helper()
	r := testcluster.RedisFor(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()}})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newDiffEnvPostgres: the four PostgreSQL shards of newShEnv (each with
// its replicas behind a freshread plugin), IDs minted by a generator
// leased on Redis, every order's pair in a lookup cached on Redis.
func newDiffEnvPostgres(t *testing.T) *diffEnv {
	pg := testcluster.PostgresFor(t)
	rdb := diffRedis(t)
	ldbName := pg.CreateDatabase(t)
	ldb, err := gorm.Open(postgres.Open(pg.PrimaryDSN(ldbName)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(ldb) })
	prefix := "test:diff:" + ldbName + ":"
	look := lookup.New(lookup.Config{DB: ldb, Redis: rdb, Prefix: prefix + "lookup:", TTL: time.Minute})
	if err := look.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := newShEnv(t, withIDs(diffIDs(t, rdb, prefix+"idgen")), withLookup(look))
	ref, err := gorm.Open(postgres.Open(pg.PrimaryDSN(pg.CreateDatabase(t))), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(ref) })
	if err := ref.AutoMigrate(&ShOrder{}, &ShItem{}); err != nil {
		t.Fatal(err)
	}
	return &diffEnv{t: t, engine: "postgres", db: e.db, s: e.s, ref: ref, direct: e.direct, names: shardNames,
		ldb: ldb, rdb: rdb, prefix: prefix + "lookup:"}
}

// newDiffEnvMariaDB: four MariaDB shards (databases of the shared
// primary, given as DB: no replicas), the same generator and lookup (its
// table on MariaDB, cached on Redis).
func newDiffEnvMariaDB(t *testing.T) *diffEnv {
	m := testcluster.MariaDBFor(t)
	rdb := diffRedis(t)
	open := func(models ...any) (*gorm.DB, string) {
		name := m.CreateDatabase(t)
		db, err := gorm.Open(mysql.Open(m.PrimaryDSN(name)), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(db) })
		if err := db.AutoMigrate(models...); err != nil {
			t.Fatal(err)
		}
		return db, name
	}
	ldb, ldbName := open()
	prefix := "test:diff:maria:" + ldbName + ":"
	look := lookup.New(lookup.Config{DB: ldb, Redis: rdb, Prefix: prefix + "lookup:", TTL: time.Minute})
	// The lookup's table, as Migrate makes it; Migrate's backfill table
	// has a column MariaDB reserves (rows), and the backfill is
	// PostgreSQL's.
	if err := ldb.Exec("CREATE TABLE order_lookup (order_id bigint PRIMARY KEY, user_id bigint NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	def, _ := open()
	ref, _ := open(&ShOrder{}, &ShItem{})
	names := []string{"m0", "m1", "m2", "m3"}
	direct := map[string]*gorm.DB{}
	var shards []sharding.ShardConfig
	for _, n := range names {
		d, _ := open(&ShOrder{}, &ShItem{})
		direct[n] = d
		shards = append(shards, sharding.ShardConfig{Name: n, DB: d})
	}
	s := sharding.New(sharding.Config{
		Tables:    []sharding.Table{{Name: "orders", Key: "user_id", ID: "id", Lookup: true}, {Name: "order_items", Key: "user_id"}},
		Shards:    shards,
		Algorithm: sharding.EvenBuckets(1024, names...),
		IDs:       diffIDs(t, rdb, prefix+"idgen"),
		Lookup:    look,
	})
	if err := def.Use(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &diffEnv{t: t, engine: "mariadb", db: def, s: s, ref: ref, direct: direct, names: names,
		ldb: ldb, rdb: rdb, prefix: prefix + "lookup:"}
}

// pickUsers chooses two users on each shard (bucket neighbours apart).
func (e *diffEnv) pickUsers() {
	per := map[string]int{}
	for u := int64(1); len(e.users) < 2*len(e.names); u++ {
		if sh := e.s.ShardOf(u); per[sh] < 2 {
			per[sh]++
			e.users = append(e.users, u)
		}
		if u > 100000 {
			e.t.Fatal("no users for the test")
		}
	}
}

func TestShardingDifferential(t *testing.T) {
	ops, ran, discrepancies := runDifferential(t, newDiffEnvPostgres(t))
	if ran == 0 || discrepancies != 0 {
		t.Fatalf("%d operations, %d run on both sides, %d discrepancies with the reference; want some run and none", ops, ran, discrepancies)
	}
}

func TestMariaDBShardingDifferential(t *testing.T) {
	ops, ran, discrepancies := runDifferential(t, newDiffEnvMariaDB(t))
	if ran == 0 || discrepancies != 0 {
		t.Fatalf("%d operations, %d run on both sides, %d discrepancies with the reference; want some run and none", ops, ran, discrepancies)
	}
}

// runDifferential runs e's workload and returns how many operations it
// made, how many of them both sides ran, and how many answers or states
// differed from the reference (each also reported as it happened).
func runDifferential(t *testing.T, e *diffEnv) (ops, ran, discrepancies int) {
	seed, steps := diffSeed(t), diffSteps(t)
	keepGoing := os.Getenv("FRESHREAD_DIFF_KEEPGOING") == "1"
	t.Logf("%s: seed %d (replay: FRESHREAD_DIFF_SEED=%d), %d steps", e.engine, seed, seed, steps)
	e.rng = rand.New(rand.NewSource(seed))
	e.ids = map[int64]bool{}
	e.nextItem = 1
	e.pickUsers()

	// The fixed regressions first, then the random workload (each step
	// chosen when it runs, so that it sees the rows of the earlier ones).
	fixed := e.regressions()
	total := len(fixed) + steps
	type tally struct{ ran, refused, bothFailed int }
	reasons := map[string]int{} // refusals by shape and error, numbers elided
	counts := map[string]*tally{}
	var history []string
	found := 0
	for i := 0; i < total; i++ {
		var op diffOp
		if i < len(fixed) {
			op = fixed[i]
		} else {
			op = e.randomOp()
		}
		c := counts[op.shape]
		if c == nil {
			c = &tally{}
			counts[op.shape] = c
		}
		line := fmt.Sprintf("step %d: %s", i, op.desc)
		history = append(history, line)
		if len(history) > 12 {
			history = history[1:]
		}
		problem := e.step(op, func(err error) { c.refused++; reasons[op.shape+": "+refusalReason(err)]++ }, func() { c.bothFailed++ }, func() { c.ran++ })
		if problem == "" {
			problem = e.compareRows()
		}
		if problem == "" {
			continue
		}
		found++
		msg := fmt.Sprintf("%s: seed %d, %s (shape %s):\n%s\nlast steps:\n  %s", e.engine, seed, line, op.shape, problem, strings.Join(history, "\n  "))
		if !keepGoing {
			t.Fatal(msg)
		}
		t.Errorf("%s", msg)
		e.resync()
	}
	var shapes []string
	for s := range counts {
		shapes = append(shapes, s)
	}
	sort.Strings(shapes)
	var b strings.Builder
	for _, s := range shapes {
		c := counts[s]
		fmt.Fprintf(&b, "\n  %-28s ran %3d  refused %3d  failed on both %3d", s, c.ran, c.refused, c.bothFailed)
	}
	t.Logf("%s: %d operations (%d fixed regressions), %d discrepancies; per shape:%s", e.engine, total, len(fixed), found, b.String())
	var rs []string
	for r, n := range reasons {
		rs = append(rs, fmt.Sprintf("\n  %3d  %s", n, r))
	}
	sort.Strings(rs)
	t.Logf("%s: refusals:%s", e.engine, strings.Join(rs, ""))
	for _, c := range counts {
		ran += c.ran
	}
	return total, ran, found
}

// step runs op on the sharded side and, when it was not refused, on the
// reference, and compares the answers. It returns the discrepancy ("" if
// none).
func (e *diffEnv) step(op diffOp, refused func(error), bothFailed, ran func()) string {
	got, n, err := op.run(diffSide{db: e.db, s: e.s})
	if err != nil && isRefusal(err) {
		refused(err)
		return "" // compareRows checks nothing was written
	}
	want, rn, rerr := op.run(diffSide{db: e.ref})
	switch {
	case err != nil && rerr != nil:
		bothFailed()
		return ""
	case err != nil:
		return fmt.Sprintf("sharded failed (%v), the reference answered %s (%d rows)", err, short(want), rn)
	case rerr != nil:
		return fmt.Sprintf("sharded answered %s (%d rows), the reference failed: %v", short(got), n, rerr)
	}
	ran()
	if op.write && n != rn {
		return fmt.Sprintf("rows affected: sharded %d, reference %d", n, rn)
	}
	if !sameResult(got, want) {
		return fmt.Sprintf("answers differ:\n sharded   %s\n reference %s", short(got), short(want))
	}
	return ""
}

// allRows reads every order and item of the shards (directly, each
// checked to be on its user's shard) and of the reference.
func (e *diffEnv) compareRows() string {
	var problems []string
	var orders []ShOrder
	var items []ShItem
	seen := map[int64]string{}
	for _, name := range e.names {
		var os []ShOrder
		var is []ShItem
		if err := e.direct[name].Order("id").Find(&os).Error; err != nil {
			e.t.Fatal(err)
		}
		if err := e.direct[name].Order("id").Find(&is).Error; err != nil {
			e.t.Fatal(err)
		}
		for _, o := range os {
			if want := e.s.ShardOf(o.UserID); want != name {
				problems = append(problems, fmt.Sprintf("order %d of user %d on %s, its user's shard is %s", o.ID, o.UserID, name, want))
			}
			if other, dup := seen[o.ID]; dup {
				problems = append(problems, fmt.Sprintf("order %d on %s and on %s", o.ID, other, name))
			}
			seen[o.ID] = name
		}
		for _, it := range is {
			if want := e.s.ShardOf(it.UserID); want != name {
				problems = append(problems, fmt.Sprintf("item %d of user %d on %s, its user's shard is %s", it.ID, it.UserID, name, want))
			}
		}
		orders, items = append(orders, os...), append(items, is...)
	}
	sort.Slice(orders, func(i, j int) bool { return orders[i].ID < orders[j].ID })
	sort.Slice(items, func(i, j int) bool { return items[i].ID < items[j].ID })
	var refOrders []ShOrder
	var refItems []ShItem
	if err := e.ref.Order("id").Find(&refOrders).Error; err != nil {
		e.t.Fatal(err)
	}
	if err := e.ref.Order("id").Find(&refItems).Error; err != nil {
		e.t.Fatal(err)
	}
	if d := diffRows(orders, refOrders, func(o ShOrder) int64 { return o.ID }); d != "" {
		problems = append(problems, "orders: "+d)
	}
	if d := diffRows(items, refItems, func(it ShItem) int64 { return it.ID }); d != "" {
		problems = append(problems, "items: "+d)
	}
	return strings.Join(problems, "\n")
}

// diffRows describes how the sharded rows differ from the reference's
// (both sorted by ID).
func diffRows[T any](got, want []T, id func(T) int64) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	g := map[int64][]T{}
	for _, r := range got {
		g[id(r)] = append(g[id(r)], r)
	}
	w := map[int64]T{}
	for _, r := range want {
		w[id(r)] = r
	}
	var out []string
	for _, r := range want {
		if rows := g[id(r)]; len(rows) == 0 {
			out = append(out, fmt.Sprintf("missing %+v", r))
		} else if !reflect.DeepEqual(rows[0], r) {
			out = append(out, fmt.Sprintf("sharded %+v, reference %+v", rows[0], r))
		}
	}
	for _, r := range got {
		if _, ok := w[id(r)]; !ok {
			out = append(out, fmt.Sprintf("extra %+v", r))
		}
	}
	return strings.Join(out, "; ")
}

// resync puts the shards and the lookup back to the reference's rows
// (FRESHREAD_DIFF_KEEPGOING) after a discrepancy.
func (e *diffEnv) resync() {
	t := e.t
	var orders []ShOrder
	var items []ShItem
	if err := e.ref.Find(&orders).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.ref.Find(&items).Error; err != nil {
		t.Fatal(err)
	}
	for _, name := range e.names {
		d := e.direct[name]
		for _, q := range []string{"DELETE FROM orders", "DELETE FROM order_items"} {
			if err := d.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, o := range orders {
		if err := e.direct[e.s.ShardOf(o.UserID)].Create(&o).Error; err != nil {
			t.Fatal(err)
		}
	}
	for _, it := range items {
		if err := e.direct[e.s.ShardOf(it.UserID)].Create(&it).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ldb.Exec("DELETE FROM order_lookup").Error; err != nil {
		t.Fatal(err)
	}
	for _, o := range orders {
		if err := e.ldb.Exec("INSERT INTO order_lookup (order_id, user_id) VALUES (?, ?)", o.ID, o.UserID).Error; err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	for id := range e.ids {
		keys = append(keys, e.prefix+strconv.FormatInt(id, 10))
	}
	if len(keys) > 0 {
		if err := e.rdb.Del(context.Background(), keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

var diffNumbers = regexp.MustCompile(`-?[0-9]+`)

// refusalReason is a refusal's message with its numbers elided (to count
// them by kind).
func refusalReason(err error) string {
	msg := diffNumbers.ReplaceAllString(err.Error(), "N")
	if len(msg) > 160 {
		msg = msg[:160]
	}
	return msg
}
