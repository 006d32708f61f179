package integration_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lookup"
)

// staleEnv is a sharded environment whose lookup caches its pairs in a
// Redis server of its own, which stale pauses.
type staleEnv struct {
	*shEnv
	st     *lookup.Store
	ldb    *gorm.DB      // the lookup's database
	admin  *redis.Client // the cache, read and paused directly
	prefix string        // of the cache's keys
	a, b   int64         // two users on different shards; a is 1
}

func newStaleEnv(t *testing.T) *staleEnv {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	r := testcluster.RedisWithArgsFor(t) // its own server: it is paused
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()},
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	admin := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { admin.Close() })
	name := pg.CreateDatabase(t)
	ldb, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(ldb) })
	prefix := "test:" + name + ":"
	st := lookup.New(lookup.Config{DB: ldb, Redis: rdb, Prefix: prefix, TTL: time.Minute})
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := &staleEnv{shEnv: newShEnv(t, withLookup(st)), st: st, ldb: ldb, admin: admin, prefix: prefix, a: 1, b: 2}
	for e.s.ShardOf(e.b) == e.s.ShardOf(e.a) {
		e.b++
	}
	return e
}

// stale leaves the cache naming user a for orders ids while the lookup's
// table names user b: the cache is unreachable when a transaction that
// created them for a rolls back, and while they are then created for b
// (the rollback could not delete the cached pairs, the second Create
// could not overwrite them). The orders are b's, on b's shard, amount 1.
func (e *staleEnv) stale(ids ...int64) {
	t := e.t
	t.Helper()
	ctx := context.Background()
	var forA, forB []ShOrder
	for _, id := range ids {
		forA = append(forA, ShOrder{ID: id, UserID: e.a, Status: "rolled back"})
		forB = append(forB, ShOrder{ID: id, UserID: e.b, Status: "kept", Amount: 1})
	}
	rollback := errors.New("roll back")
	err := e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&forA).Error; err != nil {
			return err
		}
		// Redis unreachable from here on, for 1.5 s.
		if err := e.admin.Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("the rolled-back transaction: %v", err)
	}
	if err := e.db.Create(&forB).Error; err != nil {
		t.Fatal(err)
	}
	// Redis answers again (and the lookup's breaker closes after its
	// probe): its entries for the IDs are a's.
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := e.admin.Get(ctx, e.prefix+strconv.FormatInt(ids[0], 10)).Result()
		if err == nil && !e.st.BreakerOpen() {
			break
		}
		if errors.Is(err, redis.Nil) {
			t.Fatalf("no cached pair of order %d: the case is not made", ids[0])
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis: %v (%q), breaker open %v", err, v, e.st.BreakerOpen())
		}
		time.Sleep(50 * time.Millisecond)
		var x ShOrder
		_ = e.db.Where("id = ?", 1).Find(&x).Error // a lookup call: lets the breaker probe
	}
	for _, id := range ids {
		if v := e.cached(id); v != strconv.FormatInt(e.a, 10) {
			t.Fatalf("the cached pair of order %d names user %q, not a (%d): the case is not made", id, v, e.a)
		}
	}
	t.Logf("cached pairs of orders %v: user %d (the table: user %d)", ids, e.a, e.b)
}

// cached is the user the cache names for order id ("" for none).
func (e *staleEnv) cached(id int64) string {
	e.t.Helper()
	v, err := e.admin.Get(context.Background(), e.prefix+strconv.FormatInt(id, 10)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// pairs counts the lookup table's pairs of order id.
func (e *staleEnv) pairs(id int64) int64 {
	e.t.Helper()
	var n int64
	if err := e.ldb.Table("order_lookup").Where("order_id = ?", id).Count(&n).Error; err != nil {
		e.t.Fatal(err)
	}
	return n
}

// stored is order id as stored on its shards, read directly (ok false
// when no shard holds it).
func (e *staleEnv) stored(id int64) (o ShOrder, ok bool) {
	e.t.Helper()
	for _, name := range e.names {
		var rows []ShOrder
		if err := e.direct[name].Where("id = ?", id).Find(&rows).Error; err != nil {
			e.t.Fatal(err)
		}
		if len(rows) > 0 {
			return rows[0], true
		}
	}
	return ShOrder{}, false
}

// TestShardingLookupStaleCache: the lookup's cache (Redis) is unreachable
// when a transaction that created order X for user A rolls back, and
// while X is then created for user B on another shard: the table holds
// X -> B, but Redis, reachable again, still holds X -> A (the rollback
// could not delete it, the second Create could not overwrite it). Reads
// and writes by X's ID must still find B's order.
func TestShardingLookupStaleCache(t *testing.T) {
	e := newStaleEnv(t)
	const id = 9001
	e.stale(id)
	b := e.b

	var got ShOrder
	if err := e.db.First(&got, id).Error; err != nil || got.UserID != b {
		t.Fatalf("order %d read by ID: %+v, %v; want user %d's", id, got, err, b)
	}
	res := e.db.Model(&ShOrder{}).Where("id = ?", id).Update("amount", 2)
	if res.Error != nil || res.RowsAffected != 1 {
		t.Fatalf("order %d updated by ID: %d rows, %v; want 1", id, res.RowsAffected, res.Error)
	}
	var rows []ShOrder
	if err := e.db.Where("id IN ?", []int64{id, 1}).Find(&rows).Error; err != nil || len(rows) != 1 || rows[0].Amount != 2 {
		t.Fatalf("orders read by an IN list of IDs: %+v, %v; want order %d with amount 2", rows, err, id)
	}
	res = e.db.Delete(&ShOrder{}, id)
	if res.Error != nil || res.RowsAffected != 1 {
		t.Fatalf("order %d deleted by ID: %d rows, %v; want 1", id, res.RowsAffected, res.Error)
	}
	if n := e.totalOrders(); n != 0 {
		t.Fatalf("%d orders left, want 0", n)
	}
}

// TestShardingLookupStaleUncounted: reads whose answer does not show that
// they missed an order — Row().Scan, Rows(), Scan into a struct that is
// not the model, count(*) by ID (one row, 0, when the order is missed) —
// by the ID of an order whose cached pair is stale (the cache names user
// A's shard, the order is B's on another) read B's order. They cannot be
// re-checked by the rows they return, so the pair of an ID the lookup
// placed (not minted) is checked against the lookup's table before they
// are routed. Before, each read found nothing: Row().Scan sql.ErrNoRows,
// Rows() no row, Scan a zero struct, Count 0.
func TestShardingLookupStaleUncounted(t *testing.T) {
	e := newStaleEnv(t)
	ids := []int64{9101, 9102, 9103, 9104, 9105}
	e.stale(ids...)
	b := e.b
	// Queries on the lookup's table.
	var lookupReads int
	if err := e.ldb.Callback().Query().After("gorm:query").Register("test:count_lookup_reads", func(*gorm.DB) { lookupReads++ }); err != nil {
		t.Fatal(err)
	}
	orders := func() *gorm.DB { return e.db.Model(&ShOrder{}) }

	var user int64
	if err := orders().Select("user_id").Where("id = ?", ids[0]).Row().Scan(&user); err != nil || user != b {
		t.Errorf("Row().Scan of order %d: user %d, %v; want %d", ids[0], user, err, b)
	}
	rows, err := orders().Select("user_id, amount").Where("id = ?", ids[1]).Rows()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var u int64
		var amount int
		if err := rows.Scan(&u, &amount); err != nil {
			t.Fatal(err)
		}
		if u != b || amount != 1 {
			t.Errorf("Rows() of order %d: user %d amount %d; want user %d amount 1", ids[1], u, amount, b)
		}
		n++
	}
	rows.Close()
	if n != 1 {
		t.Errorf("Rows() of order %d: %d rows, want 1", ids[1], n)
	}
	var x struct {
		UserID int64
		Amount int
	}
	if err := orders().Select("user_id, amount").Where("id = ?", ids[2]).Scan(&x).Error; err != nil || x.UserID != b || x.Amount != 1 {
		t.Errorf("Scan of order %d: %+v, %v; want user %d amount 1", ids[2], x, err, b)
	}
	var count int64
	if err := orders().Where("id = ?", ids[3]).Count(&count).Error; err != nil || count != 1 {
		t.Errorf("Count of order %d: %d, %v; want 1", ids[3], count, err)
	}
	var total struct{ N, S int64 }
	if err := orders().Select("count(*) AS n, sum(amount) AS s").Where("id = ?", ids[4]).Find(&total).Error; err != nil || total.N != 1 || total.S != 1 {
		t.Errorf("count(*), sum(amount) of order %d: %+v, %v; want 1, 1", ids[4], total, err)
	}
	for _, id := range ids {
		if v := e.cached(id); v != strconv.FormatInt(b, 10) {
			t.Errorf("the cached pair of order %d names user %q, want %d (corrected)", id, v, b)
		}
	}
	t.Logf("lookup table reads for the 5 reads: %d", lookupReads)

	// The cost: a read by a cached ID through Row reads the lookup's
	// table once more than one the plugin counts (First).
	const reps = 200
	measure := func(read func() error) (time.Duration, int) {
		before := lookupReads
		start := time.Now()
		for range reps {
			if err := read(); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start) / reps, lookupReads - before
	}
	rowDur, rowReads := measure(func() error {
		return orders().Select("user_id").Where("id = ?", ids[0]).Row().Scan(&user)
	})
	firstDur, firstReads := measure(func() error {
		var o ShOrder
		return e.db.Where("id = ?", ids[0]).First(&o).Error
	})
	t.Logf("by a cached ID, %d reads each: Row().Scan %v and %d lookup-table reads; First %v and %d lookup-table reads", reps, rowDur, rowReads, firstDur, firstReads)
	if rowReads != reps || firstReads != 0 {
		t.Errorf("lookup-table reads: Row().Scan %d, First %d; want %d and 0", rowReads, firstReads, reps)
	}
}
