package sharding

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// A Create whose rows live on several shards, outside any transaction,
// inserts each shard's part in a transaction of the statement's own
// (statement_tx.go): a part that fails rolls every part back. What is
// left is a failure between the commits: the shards that committed keep
// their rows (tg.create.inserted holds them then), and the statement
// would return an error having written part of its rows. So those rows
// are deleted again, by their IDs, before the error is returned: the
// statement's outcome is then a failure that wrote nothing. Rows an
// earlier attempt left (a Create routed again after the shard guard
// refused it, at.done) are removed the same way. Inside the caller's
// transaction (db.Transaction, CreateInBatches) its rollback removes
// them, and nothing is done here.

// undoSplitCreate deletes the rows that the failed Create of tg (and its
// earlier attempts, at.done) inserted. It returns the error to report
// (err, or err with the rows it could not remove named) and whether the
// statement is left having written nothing (none).
func (s *Sharding) undoSplitCreate(db *gorm.DB, tg *target, at *attempt, err error) (none bool, _ error) {
	plan := tg.create
	if plan == nil || plan.single || tg.tx != nil || tg.lazy != nil || tg.many || errors.Is(err, ErrCommitPending) {
		return false, err // ErrCommitPending: every part committed
	}
	byShard := map[int][]any{}
	add := func(i, si int) error {
		id, ok := s.rowID(db, tg, i)
		if !ok {
			return fmt.Errorf("row %d has no ID to remove it by", i)
		}
		byShard[si] = append(byShard[si], id)
		return nil
	}
	var problems []string
	for _, i := range plan.inserted {
		if e := add(i, plan.shardOf(i)); e != nil {
			problems = append(problems, e.Error())
		}
	}
	for i, si := range at.done {
		if e := add(i, si); e != nil {
			problems = append(problems, e.Error())
		}
	}
	if len(byShard) == 0 && len(problems) == 0 {
		return true, err
	}
	col := s.idColumn(db, tg)
	shards := make([]int, 0, len(byShard))
	for si := range byShard {
		shards = append(shards, si)
	}
	sort.Ints(shards)
	for _, si := range shards {
		sh := s.shards[si]
		conn := sh.db.Session(&gorm.Session{Context: db.Statement.Context, NewDB: true})
		q := "DELETE FROM " + conn.Statement.Quote(tg.t.Name) + " WHERE " + conn.Statement.Quote(col) + " IN ?"
		if e := conn.Exec(q, byShard[si]).Error; e != nil {
			problems = append(problems, fmt.Sprintf("shard %q: %v", sh.name, e))
		}
	}
	if len(problems) > 0 {
		return false, fmt.Errorf("%w (and the rows it had inserted on other shards could not all be removed, so part of it is written: %s)", err, strings.Join(problems, "; "))
	}
	return true, err
}

// idColumn is the column a Create's rows are removed by: the table's ID
// (Table.ID), else the model's primary key.
func (s *Sharding) idColumn(db *gorm.DB, tg *target) string {
	if tg.t.ID != "" {
		return tg.t.ID
	}
	if sc := db.Statement.Schema; sc != nil && sc.PrioritizedPrimaryField != nil {
		return sc.PrioritizedPrimaryField.DBName
	}
	return ""
}

// rowID is row i's value of idColumn, filled in by its insert.
func (s *Sharding) rowID(db *gorm.DB, tg *target, i int) (int64, bool) {
	col := s.idColumn(db, tg)
	if col == "" {
		return 0, false
	}
	plan := tg.create
	row := plan.rows
	if !plan.single {
		row = plan.rows.Index(i)
	}
	for row.Kind() == reflect.Pointer || row.Kind() == reflect.Interface {
		row = row.Elem()
	}
	var f *schema.Field
	if db.Statement.Schema != nil {
		f = db.Statement.Schema.LookUpField(col)
	}
	id, ok := rowValue(db.Statement.Context, row, f, col)
	return id, ok && id != 0
}
