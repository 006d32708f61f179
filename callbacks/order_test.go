package callbacks

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

type Order struct {
	ID     uint
	UserID uint
}

type Note struct {
	ID   uint
	Text string
}

// trace records, in order, the callbacks run on one statement: the name,
// and "(parked)" when the statement was parked by sharding:route, and
// "(sql)" when GORM had built its SQL by then.
type trace struct{ got []string }

func (tr *trace) add(name string, db *gorm.DB) {
	switch {
	case db.Error != nil:
		name += "(parked)"
	case db.Statement.SQL.Len() > 0:
		name += "(sql)"
	}
	tr.got = append(tr.got, name)
}

type freshness struct{ tr *trace }

func (f freshness) RouteRead(db *gorm.DB)         { f.tr.add(Route, db) }
func (f freshness) WriteOnPrimary(db *gorm.DB)    { f.tr.add(Primary, db) }
func (f freshness) MarkModelWrite(db *gorm.DB)    { f.tr.add(Mark, db) }
func (f freshness) MarkModelKeys(db *gorm.DB)     { f.tr.add(MarkKey, db) }
func (f freshness) MarkRawWrite(db *gorm.DB)      { f.tr.add(Mark, db) }
func (f freshness) PublishAutocommit(db *gorm.DB) { f.tr.add(Publish, db) }
func (f freshness) RetryOnPrimary(db *gorm.DB)    { f.tr.add(Retry, db) }
func (f freshness) RelearnAfterDDL(db *gorm.DB)   { f.tr.add(Relearn, db) }

var errParked = errors.New("parked by sharding:route")

// sharding parks statements on orders, as the sharding plugin does once it
// has run them on their shard.
type sharding struct{ tr *trace }

func (s sharding) Route(c Chain, db *gorm.DB) {
	s.tr.add(ShardRoute+"/"+c.String(), db)
	if db.Statement.Table == "orders" || strings.Contains(db.Statement.SQL.String(), "orders") {
		db.Error = errParked
	}
}

func (s sharding) Finish(db *gorm.DB) {
	s.tr.add(ShardFinish, db)
	if errors.Is(db.Error, errParked) {
		db.Error = nil
	}
}

func dryDB(t *testing.T) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: "host=127.0.0.1 port=1 sslmode=disable"}),
		&gorm.Config{DryRun: true, DisableAutomaticPing: true, SkipDefaultTransaction: true, Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// statements runs one statement per chain on table (orders or notes).
var statements = []struct {
	chain Chain
	run   func(db *gorm.DB, table string) error
}{
	{Create, func(db *gorm.DB, table string) error { return db.Table(table).Create(map[string]any{"id": 1}).Error }},
	{Query, func(db *gorm.DB, table string) error { var n []Note; return db.Table(table).Find(&n).Error }},
	{Row, func(db *gorm.DB, table string) error {
		db.Raw("SELECT id FROM " + table).Row() // DryRun: a nil *sql.Row
		return nil
	}},
	{Update, func(db *gorm.DB, table string) error {
		return db.Table(table).Where("id = ?", 1).Update("id", 2).Error
	}},
	{Delete, func(db *gorm.DB, table string) error { return db.Table(table).Where("id = ?", 1).Delete(&Note{}).Error }},
	{Raw, func(db *gorm.DB, table string) error { return db.Exec("DELETE FROM " + table).Error }},
}

func runAll(t *testing.T, db *gorm.DB, tr *trace, table string) map[Chain][]string {
	t.Helper()
	out := map[Chain][]string{}
	for _, st := range statements {
		tr.got = nil
		_ = st.run(db.Session(&gorm.Session{}), table) // DryRun: nothing reaches a server
		out[st.chain] = slices.Clone(tr.got)
	}
	return out
}

func checkOrders(t *testing.T, what string, got, want map[Chain][]string) {
	t.Helper()
	for _, c := range Chains {
		if !slices.Equal(got[c], want[c]) {
			t.Errorf("%s, %s chain:\n got  %q\n want %q", what, c, got[c], want[c])
		}
	}
}

// TestOrderFreshnessAlone pins where the freshness callbacks run in each
// chain: routing before GORM builds the SQL, marking before the write,
// retrying right after the query, publishing last.
func TestOrderFreshnessAlone(t *testing.T) {
	db := dryDB(t)
	tr := &trace{}
	if err := RegisterFreshness(db, freshness{tr}); err != nil {
		t.Fatal(err)
	}
	checkOrders(t, "freshness alone", runAll(t, db, tr, "notes"), map[Chain][]string{
		Create: {Primary, Mark, MarkKey + "(sql)", Publish + "(sql)"},
		Query:  {Route, Retry + "(sql)", Publish + "(sql)"},
		Row:    {Route + "(sql)", Retry + "(sql)", Publish + "(sql)"}, // raw SQL: built before the chain
		Update: {Primary, Mark, MarkKey + "(sql)", Publish + "(sql)"},
		Delete: {Primary, Mark, MarkKey + "(sql)", Publish + "(sql)"},
		Raw:    {Primary + "(sql)", Mark + "(sql)", Publish + "(sql)", Relearn + "(sql)"},
	})
}

// TestOrderOnOneStatement pins the order of the sharding and freshness
// callbacks on one *gorm.DB: sharding:route first, sharding:finish last on
// every chain; a statement sharding:route parks (it ran on its shard)
// passes every freshness callback parked, so none acts on it; any other
// goes through them as without sharding.
func TestOrderOnOneStatement(t *testing.T) {
	db := dryDB(t)
	tr := &trace{}
	if err := RegisterFreshness(db, freshness{tr}); err != nil {
		t.Fatal(err)
	}
	if err := RegisterSharding(db, sharding{tr}); err != nil {
		t.Fatal(err)
	}
	checkOrders(t, "sharded table", runAll(t, db, tr, "orders"), map[Chain][]string{
		Create: {ShardRoute + "/create", Primary + "(parked)", Mark + "(parked)", MarkKey + "(parked)", Publish + "(parked)", ShardFinish + "(parked)"},
		Query:  {ShardRoute + "/query", Route + "(parked)", Retry + "(parked)", Publish + "(parked)", ShardFinish + "(parked)"},
		Row:    {ShardRoute + "/row(sql)", Route + "(parked)", Retry + "(parked)", Publish + "(parked)", ShardFinish + "(parked)"},
		Update: {ShardRoute + "/update", Primary + "(parked)", Mark + "(parked)", MarkKey + "(parked)", Publish + "(parked)", ShardFinish + "(parked)"},
		Delete: {ShardRoute + "/delete", Primary + "(parked)", Mark + "(parked)", MarkKey + "(parked)", Publish + "(parked)", ShardFinish + "(parked)"},
		Raw:    {ShardRoute + "/raw(sql)", Primary + "(parked)", Mark + "(parked)", Publish + "(parked)", Relearn + "(parked)", ShardFinish + "(parked)"},
	})
	checkOrders(t, "unsharded table", runAll(t, db, tr, "notes"), map[Chain][]string{
		Create: {ShardRoute + "/create", Primary, Mark, MarkKey + "(sql)", Publish + "(sql)", ShardFinish + "(sql)"},
		Query:  {ShardRoute + "/query", Route, Retry + "(sql)", Publish + "(sql)", ShardFinish + "(sql)"},
		Row:    {ShardRoute + "/row(sql)", Route + "(sql)", Retry + "(sql)", Publish + "(sql)", ShardFinish + "(sql)"},
		Update: {ShardRoute + "/update", Primary, Mark, MarkKey + "(sql)", Publish + "(sql)", ShardFinish + "(sql)"},
		Delete: {ShardRoute + "/delete", Primary, Mark, MarkKey + "(sql)", Publish + "(sql)", ShardFinish + "(sql)"},
		Raw:    {ShardRoute + "/raw(sql)", Primary + "(sql)", Mark + "(sql)", Publish + "(sql)", Relearn + "(sql)", ShardFinish + "(sql)"},
	})
}
