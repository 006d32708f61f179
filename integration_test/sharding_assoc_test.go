package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// The association models: orders (sharded by user_id) with every GORM
// association shape, to sharded tables of the same key (order_items,
// order_notes, order_comments), to itself, and to tables of the default
// database (tags through the join table order_tags, products); users and
// profiles stay on the default database and have the orders of a user.
type AsOrder struct {
	ID        int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID    int64
	Status    string
	Amount    int
	ParentID  *int64
	ProductID *int64
	Items     []AsItem    `gorm:"foreignKey:OrderID"`   // has-many, co-located
	Note      *AsNote     `gorm:"foreignKey:OrderID"`   // has-one, co-located
	Comments  []AsComment `gorm:"polymorphic:Owner"`    // polymorphic has-many, co-located
	Parent    *AsOrder    `gorm:"foreignKey:ParentID"`  // belongs-to, self
	Children  []AsOrder   `gorm:"foreignKey:ParentID"`  // has-many, self
	Tags      []AsTag     `gorm:"many2many:order_tags"` // many2many, default database
	Product   *AsProduct  `gorm:"foreignKey:ProductID"` // belongs-to, default database
}

func (AsOrder) TableName() string { return "orders" }

type AsItem struct {
	ID      int64 `gorm:"primaryKey;autoIncrement:false"`
	OrderID *int64
	UserID  int64
	Sku     string
	Order   *AsOrder `gorm:"foreignKey:OrderID"` // belongs-to, co-located
}

func (AsItem) TableName() string { return "order_items" }

type AsNote struct {
	ID      int64 `gorm:"primaryKey;autoIncrement:false"`
	OrderID *int64
	UserID  int64
	Text    string
}

func (AsNote) TableName() string { return "order_notes" }

type AsComment struct {
	ID        int64 `gorm:"primaryKey;autoIncrement:false"`
	OwnerID   int64
	OwnerType string
	UserID    int64
	Body      string
}

func (AsComment) TableName() string { return "order_comments" }

type AsTag struct {
	ID   int64 `gorm:"primaryKey;autoIncrement:false"`
	Name string
}

func (AsTag) TableName() string { return "tags" }

type AsProduct struct {
	ID   int64 `gorm:"primaryKey;autoIncrement:false"`
	Name string
}

func (AsProduct) TableName() string { return "as_products" }

// AsUser is unsharded: a has-one and a self-reference on the default
// database, and a has-many of the sharded orders.
type AsUser struct {
	ID        int64 `gorm:"primaryKey;autoIncrement:false"`
	Name      string
	ManagerID *int64
	Manager   *AsUser    `gorm:"foreignKey:ManagerID"`
	Profile   *AsProfile `gorm:"foreignKey:UserID"`
	Orders    []AsOrder  `gorm:"foreignKey:UserID"`
}

func (AsUser) TableName() string { return "as_users" }

type AsProfile struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID int64
	Bio    string
}

func (AsProfile) TableName() string { return "as_profiles" }

var (
	asSharded   = []any{&AsOrder{}, &AsItem{}, &AsNote{}, &AsComment{}}
	asUnsharded = []any{&AsTag{}, &AsProduct{}, &AsUser{}, &AsProfile{}}
)

// assocEnv is two shards, the default database and a reference database
// holding every table in one place.
type assocEnv struct {
	db, def, ref *gorm.DB
	direct       []*gorm.DB
	s            *sharding.Sharding
	a, a2, b     int64 // a and a2 on shard x0, b on x1
}

// assocConfig leaves foreign keys out of the schema: the shards hold
// orders without their users, and the default database users without
// their orders.
func assocConfig() *gorm.Config {
	c := quiet()
	c.DisableForeignKeyConstraintWhenMigrating = true
	return c
}

// newAssocEnv opens each database on a new database of dial.
func newAssocEnv(t *testing.T, dial func() gorm.Dialector) *assocEnv {
	t.Helper()
	open := func() *gorm.DB {
		db, err := gorm.Open(dial(), assocConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(db) })
		return db
	}
	e := &assocEnv{ref: open(), def: open(), direct: []*gorm.DB{open(), open()}}
	for _, err := range []error{
		e.ref.AutoMigrate(append(append([]any{}, asSharded...), asUnsharded...)...),
		e.def.AutoMigrate(asUnsharded...),
		e.def.Exec("CREATE TABLE order_tags (as_order_id bigint, as_tag_id bigint, PRIMARY KEY (as_order_id, as_tag_id))").Error,
		e.direct[0].AutoMigrate(asSharded...),
		e.direct[1].AutoMigrate(asSharded...),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	e.db = e.def.Session(&gorm.Session{NewDB: true})
	e.s = sharding.New(sharding.Config{
		Tables: []sharding.Table{
			{Name: "orders", Key: "user_id", ID: "id", Lookup: true},
			{Name: "order_items", Key: "user_id"},
			{Name: "order_notes", Key: "user_id"},
			{Name: "order_comments", Key: "user_id"},
		},
		Shards:    []sharding.ShardConfig{{Name: "x0", DB: e.direct[0]}, {Name: "x1", DB: e.direct[1]}},
		Algorithm: sharding.EvenBuckets(1024, "x0", "x1"),
		Lookup:    &memLookup{m: map[int64]int64{}},
	})
	if err := e.db.Use(e.s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.s.Close() })
	e.a = 1
	for u := int64(2); e.a2 == 0 || e.b == 0; u++ {
		switch {
		case e.s.ShardOf(u) == "x0" && e.a2 == 0:
			e.a2 = u
		case e.s.ShardOf(u) == "x1" && e.b == 0:
			e.b = u
		}
	}
	if e.s.ShardOf(e.a) != "x0" {
		t.Fatalf("user %d on %s", e.a, e.s.ShardOf(e.a))
	}
	return e
}

// state is every row of every table, as one database holding them all
// would list it: the shards' rows and the default database's together.
func (e *assocEnv) state(t *testing.T, sharded bool) string {
	t.Helper()
	out := ""
	for _, m := range append(append([]any{}, asSharded...), asUnsharded...) {
		rows := reflect.New(reflect.SliceOf(reflect.TypeOf(m).Elem()))
		var dbs []*gorm.DB
		switch {
		case !sharded:
			dbs = []*gorm.DB{e.ref}
		case isSharded(m):
			dbs = e.direct
		default:
			dbs = []*gorm.DB{e.def}
		}
		var all []string
		for _, d := range dbs {
			if err := d.Omit(clause.Associations).Find(rows.Interface()).Error; err != nil {
				t.Fatal(err)
			}
			rv := rows.Elem()
			for i := 0; i < rv.Len(); i++ {
				j, err := json.Marshal(rv.Index(i).Interface())
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, string(j))
			}
		}
		sort.Strings(all)
		out += fmt.Sprintf("%T: %v\n", m, all)
	}
	var jt []map[string]any
	if err := map[bool]*gorm.DB{true: e.def, false: e.ref}[sharded].Table("order_tags").Order("as_order_id, as_tag_id").Find(&jt).Error; err != nil {
		t.Fatal(err)
	}
	return out + fmt.Sprintf("order_tags: %v\n", jt)
}

func isSharded(m any) bool {
	for _, s := range asSharded {
		if reflect.TypeOf(s) == reflect.TypeOf(m) {
			return true
		}
	}
	return false
}

// memLookup is a Lookup in memory.
type memLookup struct {
	mu sync.Mutex
	m  map[int64]int64
}

func (l *memLookup) Put(_ context.Context, pairs []sharding.Pair) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range pairs {
		if u, ok := l.m[p.OrderID]; ok && u != p.UserID {
			return fmt.Errorf("order %d: %w", p.OrderID, sharding.ErrIDInUse)
		}
	}
	for _, p := range pairs {
		l.m[p.OrderID] = p.UserID
	}
	return nil
}

func (l *memLookup) Resolve(_ context.Context, ids []int64) (map[int64]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int64]int64{}
	for _, id := range ids {
		if u, ok := l.m[id]; ok {
			out[id] = u
		}
	}
	return out, nil
}

func (l *memLookup) Delete(_ context.Context, ids []int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		delete(l.m, id)
	}
	return nil
}

// assocCase is one step: run on the sharded database and, unless
// refused, on the reference; then every table compared row by row.
type assocCase struct {
	name   string
	refuse error // the sentinel the sharded database must return; nil: the reference's answer
	pin    int64 // run on Sharding.ForUser(db, pin)
	run    func(db *gorm.DB) error
}

// Every GORM association shape on a sharded table and on tables of the
// default database, on PostgreSQL and on MariaDB shards: created with
// nested associations, through the association API (Append, Replace,
// Delete, Clear, Find, Count) and preloaded. An operation whose rows GORM
// would write on the parent's shard although they belong to another
// shard or database, or that GORM would send without a shard key, is
// refused with ErrCrossShard or ErrNoShardKey and no row of any database
// changes; every other step leaves every table as one reference database
// given the same steps, row by row, and every read answers as it does.
func TestShardingAssociationShapes(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			var dial func() gorm.Dialector
			if engine == "postgres" {
				pg := testcluster.PostgresFor(t)
				dial = func() gorm.Dialector { return postgres.Open(pg.PrimaryDSN(pg.CreateDatabase(t))) }
			} else {
				m := testcluster.MariaDBFor(t)
				dial = func() gorm.Dialector { return mysql.Open(m.PrimaryDSN(m.CreateDatabase(t))) }
			}
			e := newAssocEnv(t, dial)
			a, a2, b := e.a, e.a2, e.b
			for _, db := range []*gorm.DB{e.def, e.ref} {
				if err := db.Create(&[]AsTag{{ID: 1, Name: "red"}, {ID: 2, Name: "blue"}}).Error; err != nil {
					t.Fatal(err)
				}
				if err := db.Create(&AsProduct{ID: 1, Name: "widget"}).Error; err != nil {
					t.Fatal(err)
				}
			}
			o10 := func() *AsOrder { return &AsOrder{ID: 10, UserID: a} }
			cases := []assocCase{
				// Created with nested associations.
				{"has-many, has-one, polymorphic created with the order", nil, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 10, UserID: a, Status: "new",
						Items:    []AsItem{{ID: 100, UserID: a, Sku: "x"}, {ID: 101, UserID: a, Sku: "y"}},
						Note:     &AsNote{ID: 200, UserID: a, Text: "n"},
						Comments: []AsComment{{ID: 300, UserID: a, Body: "c"}},
					}).Error
				}},
				{"nested: children of a user of the same shard, with their items", nil, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 11, UserID: a, Status: "new",
						Children: []AsOrder{{ID: 12, UserID: a2, Items: []AsItem{{ID: 102, UserID: a2, Sku: "z"}}}},
					}).Error
				}},
				{"belongs-to: an item with its order", nil, 0, func(db *gorm.DB) error {
					return db.Create(&AsItem{ID: 103, UserID: b, Sku: "b", Order: &AsOrder{ID: 13, UserID: b, Status: "paid"}}).Error
				}},
				{"belongs-to, self", nil, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 14, UserID: b, Parent: &AsOrder{ID: 15, UserID: b}}).Error
				}},
				{"several orders, each with its own shard's items", nil, 0, func(db *gorm.DB) error {
					return db.Create(&[]AsOrder{
						{ID: 16, UserID: a, Items: []AsItem{{ID: 106, UserID: a, Sku: "p"}}},
						{ID: 17, UserID: b, Items: []AsItem{{ID: 107, UserID: b, Sku: "q"}}, Note: &AsNote{ID: 207, UserID: b}},
					}).Error
				}},
				{"unsharded user with profile and manager", nil, 0, func(db *gorm.DB) error {
					return db.Create(&AsUser{ID: a, Name: "ann", Profile: &AsProfile{ID: 1, Bio: "b"}, Manager: &AsUser{ID: 900, Name: "boss"}}).Error
				}},
				{"has-many item of another shard", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 20, UserID: a, Items: []AsItem{{ID: 120, UserID: b}}}).Error
				}},
				{"has-many item without a key", sharding.ErrNoShardKey, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 20, UserID: a, Items: []AsItem{{ID: 120}}}).Error
				}},
				{"has-one of another shard", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 20, UserID: a, Note: &AsNote{ID: 220, UserID: b}}).Error
				}},
				{"polymorphic of another shard", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 20, UserID: a, Comments: []AsComment{{ID: 320, UserID: b}}}).Error
				}},
				{"child order of another shard", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 20, UserID: a, Children: []AsOrder{{ID: 21, UserID: b}}}).Error
				}},
				{"nested grandchild of another shard", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 20, UserID: a, Children: []AsOrder{{ID: 21, UserID: a2, Items: []AsItem{{ID: 120, UserID: b}}}}}).Error
				}},
				{"belongs-to order of another shard", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsItem{ID: 120, UserID: a, Order: &AsOrder{ID: 20, UserID: b}}).Error
				}},
				{"self belongs-to of another shard", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 20, UserID: a, Parent: &AsOrder{ID: 21, UserID: b}}).Error
				}},
				{"many2many to the default database", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 20, UserID: a, Tags: []AsTag{{ID: 1}}}).Error
				}},
				{"belongs-to a table of the default database", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsOrder{ID: 20, UserID: a, Product: &AsProduct{ID: 1}}).Error
				}},
				{"unsharded user with sharded orders", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Create(&AsUser{ID: b, Name: "bob", Orders: []AsOrder{{ID: 22, UserID: b}}}).Error
				}},

				// The association API.
				{"append has-many", nil, 0, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Items").Append(&AsItem{ID: 104, UserID: a, Sku: "w"})
				}},
				{"append polymorphic", nil, 0, func(db *gorm.DB) error {
					return db.Model(&AsOrder{ID: 13, UserID: b}).Association("Comments").Append(&AsComment{ID: 301, UserID: b, Body: "d"})
				}},
				{"append has-many, self", nil, 0, func(db *gorm.DB) error {
					return db.Model(&AsOrder{ID: 11, UserID: a}).Association("Children").Append(&AsOrder{ID: 18, UserID: a})
				}},
				{"replace belongs-to of a table without a routed ID", sharding.ErrNoShardKey, 0, func(db *gorm.DB) error {
					return db.Model(&AsItem{ID: 103, UserID: b}).Association("Order").Replace(&AsOrder{ID: 14, UserID: b})
				}},
				{"replace belongs-to", nil, b, func(db *gorm.DB) error {
					return db.Model(&AsItem{ID: 103, UserID: b}).Association("Order").Replace(&AsOrder{ID: 14, UserID: b})
				}},
				{"append has-many of another shard", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Items").Append(&AsItem{ID: 121, UserID: b})
				}},
				{"append many2many", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Tags").Append(&AsTag{ID: 2})
				}},
				{"append sharded orders to an unsharded user", sharding.ErrCrossShard, 0, func(db *gorm.DB) error {
					return db.Model(&AsUser{ID: a}).Association("Orders").Append(&AsOrder{ID: 23, UserID: a})
				}},
				{"replace has-many without the shard pinned", sharding.ErrNoShardKey, 0, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Items").Replace(&AsItem{ID: 105, UserID: a, Sku: "v"})
				}},
				{"replace has-one without the shard pinned", sharding.ErrNoShardKey, 0, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Note").Replace(&AsNote{ID: 201, UserID: a, Text: "m"})
				}},
				{"delete has-many without the shard pinned", sharding.ErrNoShardKey, 0, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Items").Delete(&AsItem{ID: 100, UserID: a})
				}},
				{"clear has-many, self, without the shard pinned", sharding.ErrNoShardKey, 0, func(db *gorm.DB) error {
					return db.Model(&AsOrder{ID: 11, UserID: a}).Association("Children").Clear()
				}},
				{"replace has-many", nil, a, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Items").Replace(&AsItem{ID: 105, UserID: a, Sku: "v"}, &AsItem{ID: 101, UserID: a, Sku: "y"})
				}},
				{"replace has-one", nil, a, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Note").Replace(&AsNote{ID: 201, UserID: a, Text: "m"})
				}},
				{"delete has-many", nil, a, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Items").Delete(&AsItem{ID: 105, UserID: a})
				}},
				{"delete polymorphic", nil, b, func(db *gorm.DB) error {
					return db.Model(&AsOrder{ID: 13, UserID: b}).Association("Comments").Delete(&AsComment{ID: 301})
				}},
				{"clear has-many, self", nil, a, func(db *gorm.DB) error {
					return db.Model(&AsOrder{ID: 11, UserID: a}).Association("Children").Clear()
				}},
				{"clear has-one", nil, b, func(db *gorm.DB) error {
					return db.Model(&AsOrder{ID: 17, UserID: b}).Association("Note").Clear()
				}},
				{"replace has-many with a row of another shard, pinned", sharding.ErrCrossShard, a, func(db *gorm.DB) error {
					return db.Model(o10()).Association("Items").Replace(&AsItem{ID: 122, UserID: b})
				}},
				{"unsharded: replace has-one and clear belongs-to", nil, 0, func(db *gorm.DB) error {
					u := &AsUser{ID: a}
					if err := db.Model(u).Association("Profile").Replace(&AsProfile{ID: 2, Bio: "c"}); err != nil {
						return err
					}
					return db.Model(u).Association("Manager").Clear()
				}},
			}
			for _, c := range cases {
				sh := e.db
				if c.pin != 0 {
					sh = e.s.ForUser(e.db, c.pin)
				}
				before := e.state(t, true)
				err := c.run(sh)
				if c.refuse != nil {
					if !errors.Is(err, c.refuse) {
						t.Errorf("%s: %v, want %v", c.name, err, c.refuse)
					}
					if after := e.state(t, true); after != before {
						t.Errorf("%s: refused but rows changed:%s", c.name, lineDiff(after, before))
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", c.name, err)
				}
				if err := c.run(e.ref); err != nil {
					t.Fatalf("%s: reference: %v", c.name, err)
				}
				if got, want := e.state(t, true), e.state(t, false); got != want {
					t.Errorf("%s: sharded (+) and reference (-) differ:%s", c.name, lineDiff(got, want))
				}
			}

			// Reads: preloads of every shape, and the association API's Find and
			// Count, answer what the reference answers (rows sorted by ID: a
			// merge with Preload is not done, so there is no ORDER BY).
			reads := []struct {
				name string
				q    func(db *gorm.DB) (any, error)
			}{
				{"preload has-many, has-one, polymorphic, self, many2many, belongs-to", func(db *gorm.DB) (any, error) {
					var out []AsOrder
					err := db.Preload("Items").Preload("Note").Preload("Comments").Preload("Children").Preload("Parent").Preload("Tags").Preload("Product").
						Where("user_id IN ?", []int64{a, a2, b}).Find(&out).Error
					return sortedByID(out), err
				}},
				{"preload nested, every order", func(db *gorm.DB) (any, error) {
					var out []AsOrder
					err := db.Preload("Children.Items").Preload(clause.Associations).Find(&out).Error
					return sortedByID(out), err
				}},
				{"preload belongs-to", func(db *gorm.DB) (any, error) {
					var out []AsItem
					err := db.Preload("Order.Items").Where("user_id = ?", b).Find(&out).Error
					return sortedByID(out), err
				}},
				{"unsharded preloads: has-one, self, has-many of sharded orders", func(db *gorm.DB) (any, error) {
					var out []AsUser
					err := db.Preload("Profile").Preload("Manager").Preload("Orders.Items").Find(&out).Error
					return sortedByID(out), err
				}},
				{"association Find and Count", func(db *gorm.DB) (any, error) {
					var items []AsItem
					as := db.Model(o10()).Association("Items")
					err := as.Find(&items)
					n := db.Model(&AsOrder{ID: 11, UserID: a}).Association("Children").Count()
					return []any{sortedByID(items), n}, errors.Join(err, as.Error)
				}},
			}
			for _, r := range reads {
				got, err := r.q(e.db)
				if err != nil {
					t.Errorf("%s: %v", r.name, err)
					continue
				}
				want, err := r.q(e.ref)
				if err != nil {
					t.Fatalf("%s: reference: %v", r.name, err)
				}
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				if string(g) != string(w) || string(w) == "null" {
					t.Errorf("%s:\n sharded   %s\n reference %s", r.name, g, w)
				}
			}
		})
	}
}

// sortedByID sorts rows by their ID field.
func sortedByID[T any](rows []T) []T {
	sort.Slice(rows, func(i, j int) bool {
		return reflect.ValueOf(rows[i]).FieldByName("ID").Int() < reflect.ValueOf(rows[j]).FieldByName("ID").Int()
	})
	return rows
}

// lineDiff lists the lines of got and want that differ.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	out := ""
	for i := range max(len(g), len(w)) {
		var x, y string
		if i < len(g) {
			x = g[i]
		}
		if i < len(w) {
			y = w[i]
		}
		if x != y {
			out += "\n + " + x + "\n - " + y
		}
	}
	return out
}
