package integration_test

import (
	"errors"
	"fmt"
	"reflect"
	"sort"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// The operations of the differential test (sharding_diff_test.go).

var diffStatuses = []string{"new", "paid", "sent"}

func (e *diffEnv) user() int64 { return e.users[e.rng.Intn(len(e.users))] }

// otherUser is a user other than u, on u's shard or on another.
func (e *diffEnv) otherUser(u int64, sameShard bool) int64 {
	var out []int64
	for _, v := range e.users {
		if v != u && (e.s.ShardOf(v) == e.s.ShardOf(u)) == sameShard {
			out = append(out, v)
		}
	}
	return out[e.rng.Intn(len(out))]
}

func (e *diffEnv) anyOther(u int64) int64 { return e.otherUser(u, e.rng.Intn(3) == 0) }

func (e *diffEnv) status() string { return diffStatuses[e.rng.Intn(len(diffStatuses))] }
func (e *diffEnv) amount() int    { return e.rng.Intn(50) }

// refRows is every order of the reference, by ID.
func (e *diffEnv) refRows() []ShOrder {
	var rows []ShOrder
	if err := e.ref.Order("id").Find(&rows).Error; err != nil {
		e.t.Fatal(err)
	}
	return rows
}

// existing is a stored order (ok false when there is none).
func (e *diffEnv) existing() (ShOrder, bool) {
	rows := e.refRows()
	if len(rows) == 0 {
		return ShOrder{}, false
	}
	return rows[e.rng.Intn(len(rows))], true
}

// legacyID is an order ID the application chose (not minted): few of
// them, so that they collide.
func (e *diffEnv) legacyID() int64 { return 1 + int64(e.rng.Intn(300)) }

// mint mints an ID for u's rows.
func (e *diffEnv) mint(u int64) int64 {
	id, err := e.s.NewID(u)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// givenID is an ID for a new row of u: mostly unused, sometimes a stored
// order's (of u or of another user), sometimes minted for another user.
func (e *diffEnv) givenID(u int64) int64 {
	switch r := e.rng.Intn(10); {
	case r < 4:
		return e.legacyID()
	case r < 6:
		return e.mint(u)
	case r < 8:
		if o, ok := e.existing(); ok {
			return o.ID
		}
		return e.legacyID()
	default:
		return e.mint(e.anyOther(u))
	}
}

// someID is the ID of a stored order, mostly; else one that is not.
func (e *diffEnv) someID() int64 {
	if o, ok := e.existing(); ok && e.rng.Intn(5) != 0 {
		return o.ID
	}
	if e.rng.Intn(2) == 0 {
		return e.mint(e.user())
	}
	return e.legacyID()
}

func (e *diffEnv) someIDs() []int64 {
	n := 1 + e.rng.Intn(4)
	out := make([]int64, n)
	for i := range out {
		out[i] = e.someID()
	}
	return out
}

func (e *diffEnv) note(ids ...int64) {
	for _, id := range ids {
		if id != 0 {
			e.ids[id] = true
		}
	}
}

func (e *diffEnv) newOrder(u int64, given bool) *ShOrder {
	o := &ShOrder{UserID: u, Status: e.status(), Amount: e.amount()}
	if given {
		o.ID = e.givenID(u)
		e.note(o.ID)
	}
	return o
}

// write is a write operation; the rows it returns are RowsAffected.
func (e *diffEnv) write(shape, desc string, f func(db *gorm.DB) *gorm.DB) diffOp {
	return diffOp{shape: shape, desc: desc, write: true, run: func(d diffSide) (any, int64, error) {
		r := f(d.db)
		return nil, r.RowsAffected, r.Error
	}}
}

// created notes the IDs the rows got (minted on the sharded side, the
// reference is given them).
func (e *diffEnv) created(shape, desc string, rows any, f func(db *gorm.DB) *gorm.DB) diffOp {
	return diffOp{shape: shape, desc: desc, write: true, run: func(d diffSide) (any, int64, error) {
		r := f(d.db)
		v := reflect.Indirect(reflect.ValueOf(rows))
		if v.Kind() == reflect.Struct {
			e.note(v.Interface().(ShOrder).ID)
		} else {
			for i := 0; i < v.Len(); i++ {
				e.note(v.Index(i).Interface().(ShOrder).ID)
			}
		}
		return nil, r.RowsAffected, r.Error
	}}
}

func read[T any](shape, desc string, f func(db *gorm.DB, out *T) error) diffOp {
	return diffOp{shape: shape, desc: desc, run: func(d diffSide) (any, int64, error) {
		var out T
		err := f(d.db, &out)
		return &out, 0, err
	}}
}

// sameResult compares two answers, an empty slice equal to a nil one.
func sameResult(got, want any) bool {
	if reflect.DeepEqual(got, want) {
		return true
	}
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	if g.Kind() == reflect.Pointer && w.Kind() == reflect.Pointer && g.Elem().Kind() == reflect.Slice && w.Elem().Kind() == reflect.Slice {
		return g.Elem().Len() == 0 && w.Elem().Len() == 0
	}
	return false
}

// rawUpsert is an engine's INSERT ... that updates amount and status of
// a conflicting row; cond, when set, is the PostgreSQL conflict
// clause's WHERE.
func (e *diffEnv) rawUpsert(cond string) string {
	if e.engine == "mariadb" {
		return "INSERT INTO orders (id, user_id, status, amount) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE amount = VALUES(amount), status = VALUES(status)"
	}
	q := "INSERT INTO orders (id, user_id, status, amount) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount, status = EXCLUDED.status"
	if cond != "" {
		q += " WHERE " + cond
	}
	return q
}

// writeOp is a random write on u's rows (userOnly: only those, for a
// transaction bound to u's shard) or on any.
func (e *diffEnv) writeOp(u int64) diffOp {
	st, am := e.status(), e.amount()
	switch e.rng.Intn(32) {
	case 0, 1, 2:
		o := e.newOrder(u, false)
		return e.created("create", fmt.Sprintf("Create(%+v)", *o), o, func(db *gorm.DB) *gorm.DB { return db.Create(o) })
	case 3, 4:
		o := e.newOrder(u, true)
		return e.created("create given ID", fmt.Sprintf("Create(%+v)", *o), o, func(db *gorm.DB) *gorm.DB { return db.Create(o) })
	case 5:
		rows := []ShOrder{*e.newOrder(u, e.rng.Intn(2) == 0), *e.newOrder(e.user(), e.rng.Intn(2) == 0), *e.newOrder(e.user(), false)}
		return e.created("create batch", fmt.Sprintf("Create(%+v)", rows), &rows, func(db *gorm.DB) *gorm.DB { return db.Create(&rows) })
	case 6:
		rows := []ShOrder{*e.newOrder(u, false), *e.newOrder(e.user(), e.rng.Intn(2) == 0), *e.newOrder(e.user(), false), *e.newOrder(u, false)}
		return e.created("create in batches", fmt.Sprintf("CreateInBatches(%+v, 2)", rows), &rows, func(db *gorm.DB) *gorm.DB { return db.CreateInBatches(&rows, 2) })
	case 7, 8:
		o, ok := e.existing()
		if !ok {
			break
		}
		o.Status, o.Amount = st, am
		return e.write("save", fmt.Sprintf("Save(%+v)", o), func(db *gorm.DB) *gorm.DB { c := o; return db.Save(&c) })
	case 9:
		o := ShOrder{ID: e.givenID(u), UserID: u, Status: st, Amount: am}
		e.note(o.ID)
		return e.write("save new", fmt.Sprintf("Save(%+v)", o), func(db *gorm.DB) *gorm.DB { c := o; return db.Save(&c) })
	case 10:
		o, ok := e.existing()
		if !ok {
			break
		}
		o.UserID, o.Status = e.anyOther(o.UserID), st
		return e.write("save key change", fmt.Sprintf("Save(%+v)", o), func(db *gorm.DB) *gorm.DB { c := o; return db.Save(&c) })
	case 11:
		id := e.someID()
		return e.write("updates by ID", fmt.Sprintf("Model(&ShOrder{ID: %d}).Updates(status %q, amount %d)", id, st, am), func(db *gorm.DB) *gorm.DB {
			return db.Model(&ShOrder{ID: id}).Updates(ShOrder{Status: st, Amount: am})
		})
	case 12:
		return e.write("updates by user", fmt.Sprintf("Where(user_id = %d).Updates(status %q, amount + 1)", u, st), func(db *gorm.DB) *gorm.DB {
			return db.Model(&ShOrder{}).Where("user_id = ?", u).Updates(map[string]any{"status": st, "amount": gorm.Expr("amount + 1")})
		})
	case 13:
		id := e.someID()
		return e.write("update", fmt.Sprintf("Model(&ShOrder{ID: %d}).Update(amount, %d)", id, am), func(db *gorm.DB) *gorm.DB {
			return db.Model(&ShOrder{ID: id}).Update("amount", am)
		})
	case 14:
		o, ok := e.existing()
		if !ok {
			break
		}
		v := e.anyOther(o.UserID)
		if e.rng.Intn(4) == 0 {
			v = o.UserID // the key assigned its own value
		}
		return e.write("update key", fmt.Sprintf("Model(%+v).Update(user_id, %d)", o, v), func(db *gorm.DB) *gorm.DB {
			c := o
			return db.Model(&c).Update("user_id", v)
		})
	case 15:
		o, ok := e.existing()
		if !ok {
			break
		}
		v := o.UserID
		if e.rng.Intn(2) == 0 {
			v = e.anyOther(v)
		}
		return e.write("updates key", fmt.Sprintf("Model(%+v).Updates(user_id %d, status %q)", o, v, st), func(db *gorm.DB) *gorm.DB {
			c := o
			return db.Model(&c).Updates(ShOrder{UserID: v, Status: st})
		})
	case 16:
		id := e.someID()
		return e.write("delete by ID", fmt.Sprintf("Delete(&ShOrder{}, %d)", id), func(db *gorm.DB) *gorm.DB { return db.Delete(&ShOrder{}, id) })
	case 17:
		return e.write("delete by user", fmt.Sprintf("Where(user_id = %d AND status = %q).Delete", u, st), func(db *gorm.DB) *gorm.DB {
			return db.Where("user_id = ? AND status = ?", u, st).Delete(&ShOrder{})
		})
	case 18:
		ids := e.someIDs()
		return e.write("delete by IDs", fmt.Sprintf("Where(id IN %v).Delete", ids), func(db *gorm.DB) *gorm.DB {
			return db.Where("id IN ?", ids).Delete(&ShOrder{})
		})
	case 19:
		return e.write("delete keyless", fmt.Sprintf("Where(status = %q AND amount > 45).Delete", st), func(db *gorm.DB) *gorm.DB {
			return db.Where("status = ? AND amount > 45", st).Delete(&ShOrder{})
		})
	case 20:
		id := u
		if e.rng.Intn(2) == 0 {
			id = e.givenID(u)
		} else {
			id = e.mint(u)
		}
		e.note(id)
		return e.write("raw insert", fmt.Sprintf("INSERT (%d, %d, %q, %d)", id, u, st, am), func(db *gorm.DB) *gorm.DB {
			return db.Exec("INSERT INTO orders (id, user_id, status, amount) VALUES (?, ?, ?, ?)", id, u, st, am)
		})
	case 21:
		id := e.someID()
		return e.write("raw update by ID", fmt.Sprintf("UPDATE amount + %d WHERE id = %d", am, id), func(db *gorm.DB) *gorm.DB {
			return db.Exec("UPDATE orders SET amount = amount + ? WHERE id = ?", am, id)
		})
	case 22:
		v := e.anyOther(u)
		return e.write("raw update by users", fmt.Sprintf("UPDATE status %q WHERE user_id IN (%d, %d) AND amount > %d", st, u, v, am), func(db *gorm.DB) *gorm.DB {
			return db.Exec("UPDATE orders SET status = ? WHERE user_id IN (?, ?) AND amount > ?", st, u, v, am)
		})
	case 23:
		o, ok := e.existing()
		if !ok {
			break
		}
		v := e.anyOther(o.UserID)
		return e.write("raw update key", fmt.Sprintf("UPDATE user_id = %d WHERE id = %d (user %d)", v, o.ID, o.UserID), func(db *gorm.DB) *gorm.DB {
			return db.Exec("UPDATE orders SET user_id = ? WHERE id = ?", v, o.ID)
		})
	case 24:
		id := e.someID()
		if e.rng.Intn(2) == 0 {
			return e.write("raw delete by user", fmt.Sprintf("DELETE WHERE user_id = %d AND status = %q", u, st), func(db *gorm.DB) *gorm.DB {
				return db.Exec("DELETE FROM orders WHERE user_id = ? AND status = ?", u, st)
			})
		}
		return e.write("raw delete by ID", fmt.Sprintf("DELETE WHERE id = %d", id), func(db *gorm.DB) *gorm.DB {
			return db.Exec("DELETE FROM orders WHERE id = ?", id)
		})
	case 25:
		return e.write("raw update keyless", fmt.Sprintf("UPDATE amount = 0 WHERE status = %q", st), func(db *gorm.DB) *gorm.DB {
			return db.Exec("UPDATE orders SET amount = 0 WHERE status = ?", st)
		})
	case 26, 27:
		o := *e.newOrder(u, true)
		oc := []clause.OnConflict{
			{UpdateAll: true},
			{Columns: []clause.Column{{Name: "id"}}, DoUpdates: clause.AssignmentColumns([]string{"status", "amount"})},
			{DoNothing: true},
		}[e.rng.Intn(3)]
		return e.write("upsert", fmt.Sprintf("Clauses(%+v).Create(%+v)", oc, o), func(db *gorm.DB) *gorm.DB {
			c := o
			return db.Clauses(oc).Create(&c)
		})
	case 28:
		o := *e.newOrder(u, true)
		cond := ""
		if e.engine == "postgres" && e.rng.Intn(2) == 0 {
			cond = fmt.Sprintf("orders.user_id = %d", e.user())
		}
		q := e.rawUpsert(cond)
		return e.write("raw upsert", fmt.Sprintf("%s (%d, %d, %q, %d)", q, o.ID, o.UserID, o.Status, o.Amount), func(db *gorm.DB) *gorm.DB {
			return db.Exec(q, o.ID, o.UserID, o.Status, o.Amount)
		})
	case 29:
		rows := []ShOrder{*e.newOrder(u, true), *e.newOrder(u, true)}
		if o, ok := e.existing(); ok {
			o.Status = st
			rows = append(rows, o)
		}
		return e.write("save slice", fmt.Sprintf("Save(%+v)", rows), func(db *gorm.DB) *gorm.DB {
			c := append([]ShOrder(nil), rows...)
			return db.Save(&c)
		})
	case 30:
		o, ok := e.existing()
		if !ok {
			break
		}
		it := ShItem{ID: e.nextItem, OrderID: o.ID, UserID: o.UserID, Sku: []string{"x", "y"}[e.rng.Intn(2)]}
		e.nextItem++
		return e.write("create item", fmt.Sprintf("Create(%+v)", it), func(db *gorm.DB) *gorm.DB { c := it; return db.Create(&c) })
	case 31:
		return e.write("delete items", fmt.Sprintf("Where(user_id = %d AND sku = x).Delete(&ShItem{})", u), func(db *gorm.DB) *gorm.DB {
			return db.Where("user_id = ? AND sku = ?", u, "x").Delete(&ShItem{})
		})
	}
	o := e.newOrder(u, false)
	return e.created("create", fmt.Sprintf("Create(%+v)", *o), o, func(db *gorm.DB) *gorm.DB { return db.Create(o) })
}

// userWrite is a write on u's rows only (for a transaction on u's shard).
func (e *diffEnv) userWrite(u int64) diffOp {
	st, am := e.status(), e.amount()
	switch e.rng.Intn(6) {
	case 0, 1:
		o := e.newOrder(u, e.rng.Intn(3) == 0)
		return e.created("create", fmt.Sprintf("Create(%+v)", *o), o, func(db *gorm.DB) *gorm.DB { return db.Create(o) })
	case 2:
		return e.write("updates by user", fmt.Sprintf("UPDATE amount + %d WHERE user_id = %d AND status = %q", am, u, st), func(db *gorm.DB) *gorm.DB {
			return db.Model(&ShOrder{}).Where("user_id = ? AND status = ?", u, st).Update("amount", gorm.Expr("amount + ?", am))
		})
	case 3:
		return e.write("delete by user", fmt.Sprintf("Where(user_id = %d AND status = %q).Delete", u, st), func(db *gorm.DB) *gorm.DB {
			return db.Where("user_id = ? AND status = ?", u, st).Delete(&ShOrder{})
		})
	case 4:
		var mine []ShOrder
		for _, o := range e.refRows() {
			if o.UserID == u {
				mine = append(mine, o)
			}
		}
		if len(mine) > 0 {
			o := mine[e.rng.Intn(len(mine))]
			if e.rng.Intn(2) == 0 {
				return e.write("delete by ID", fmt.Sprintf("Delete(&ShOrder{}, %d)", o.ID), func(db *gorm.DB) *gorm.DB { return db.Delete(&ShOrder{}, o.ID) })
			}
			o.Status = st
			return e.write("save", fmt.Sprintf("Save(%+v)", o), func(db *gorm.DB) *gorm.DB { c := o; return db.Save(&c) })
		}
	case 5:
		return e.write("raw update by user", fmt.Sprintf("UPDATE status %q WHERE user_id = %d", st, u), func(db *gorm.DB) *gorm.DB {
			return db.Exec("UPDATE orders SET status = ? WHERE user_id = ?", st, u)
		})
	}
	o := e.newOrder(u, false)
	return e.created("create", fmt.Sprintf("Create(%+v)", *o), o, func(db *gorm.DB) *gorm.DB { return db.Create(o) })
}

// txOp is a transaction of a few writes: on u's shard (ForUser) or begun
// on the default database (bound by its first statement), sometimes with
// a write of another user (refused when on another shard), a savepoint
// rolled back to, a nested transaction rolled back; committed or rolled
// back.
func (e *diffEnv) txOp() diffOp {
	u := e.user()
	forUser := e.rng.Intn(2) == 0
	rollback := e.rng.Intn(3) == 0
	type part struct {
		op   diffOp
		kind int // 0 plain, 1 after a savepoint rolled back to, 2 in a nested transaction rolled back
	}
	var parts []part
	var descs []string
	for i, n := 0, 1+e.rng.Intn(4); i < n; i++ {
		p := part{op: e.userWrite(u), kind: e.rng.Intn(5)}
		if p.kind > 2 {
			p.kind = 0
		}
		if i == 0 {
			p.kind = 0
		}
		if e.rng.Intn(8) == 0 {
			p.op = e.userWrite(e.anyOther(u))
		}
		parts = append(parts, p)
		descs = append(descs, fmt.Sprintf("%s%s", []string{"", "[rolled back to savepoint] ", "[nested, rolled back] "}[p.kind], p.op.desc))
	}
	shape := "transaction"
	if forUser {
		shape = "transaction ForUser"
	}
	desc := fmt.Sprintf("%s of user %d (rollback %v): %v", shape, u, rollback, descs)
	return diffOp{shape: shape, desc: desc, write: true, run: func(d diffSide) (any, int64, error) {
		begin := d.db
		if forUser {
			begin = d.forUser(u)
		}
		err := begin.Transaction(func(tx *gorm.DB) error {
			in := diffSide{db: tx}
			for i, p := range parts {
				switch p.kind {
				case 0:
					if _, _, err := p.op.run(in); err != nil {
						return err
					}
				case 1:
					sp := fmt.Sprintf("sp%d", i)
					if err := tx.SavePoint(sp).Error; err != nil {
						return err
					}
					if _, _, err := p.op.run(in); err != nil {
						return err
					}
					if err := tx.RollbackTo(sp).Error; err != nil {
						return err
					}
				case 2:
					err := tx.Transaction(func(tx2 *gorm.DB) error {
						if _, _, err := p.op.run(diffSide{db: tx2}); err != nil {
							return err
						}
						return errDiffRollback
					})
					if !errors.Is(err, errDiffRollback) {
						return err
					}
				}
			}
			if rollback {
				return errDiffRollback
			}
			return nil
		})
		if errors.Is(err, errDiffRollback) {
			return "rolled back", 0, nil
		}
		return "committed", 0, err
	}}
}

type diffGroup struct {
	Status string
	N      int64
	Total  int64
	Lo     int64
	Hi     int64
}

type diffAgg struct {
	N     int64
	Total *int64
	Hi    *int64
}

// readOp is read number n (-1: a random one).
func (e *diffEnv) readOp(n int) diffOp {
	u, st, am := e.user(), e.status(), e.amount()
	if n < 0 {
		n = e.rng.Intn(15)
	}
	switch n {
	case 0:
		return read("by user", fmt.Sprintf("Where(user_id = %d).Order(id)", u), func(db *gorm.DB, out *[]ShOrder) error {
			return db.Where("user_id = ?", u).Order("id").Find(out).Error
		})
	case 1:
		id := e.someID()
		return read("first by ID", fmt.Sprintf("First(%d)", id), func(db *gorm.DB, out *ShOrder) error { return db.First(out, id).Error })
	case 2:
		ids := e.someIDs()
		return read("by IDs", fmt.Sprintf("Where(id IN %v)", ids), func(db *gorm.DB, out *[]ShOrder) error {
			return db.Where("id IN ?", ids).Order("id").Find(out).Error
		})
	case 3:
		id := e.someID()
		return read("by ID and user", fmt.Sprintf("Where(id = %d AND user_id = %d)", id, u), func(db *gorm.DB, out *[]ShOrder) error {
			return db.Where("id = ? AND user_id = ?", id, u).Find(out).Error
		})
	case 4:
		lim, off := 1+e.rng.Intn(6), e.rng.Intn(8)
		return read("scatter page", fmt.Sprintf("Order(amount desc, id).Limit(%d).Offset(%d)", lim, off), func(db *gorm.DB, out *[]ShOrder) error {
			return db.Order("amount desc, id").Limit(lim).Offset(off).Find(out).Error
		})
	case 5:
		return read("distinct", "Distinct(status).Order(status)", func(db *gorm.DB, out *[]string) error {
			return db.Model(&ShOrder{}).Distinct("status").Order("status").Pluck("status", out).Error
		})
	case 6:
		return read("count", fmt.Sprintf("Where(amount >= %d).Count", am), func(db *gorm.DB, out *int64) error {
			return db.Model(&ShOrder{}).Where("amount >= ?", am).Count(out).Error
		})
	case 7:
		return read("group by", "status, count, sum, min, max GROUP BY status", func(db *gorm.DB, out *[]diffGroup) error {
			return db.Model(&ShOrder{}).Select("status, count(*) AS n, sum(amount) AS total, min(amount) AS lo, max(amount) AS hi").
				Group("status").Order("status").Scan(out).Error
		})
	case 8:
		return read("aggregates", fmt.Sprintf("count, sum, max WHERE status = %q", st), func(db *gorm.DB, out *diffAgg) error {
			return db.Model(&ShOrder{}).Select("count(*) AS n, sum(amount) AS total, max(amount) AS hi").Where("status = ?", st).Scan(out).Error
		})
	case 9:
		return read("raw scatter", fmt.Sprintf("SELECT * WHERE amount >= %d", am), func(db *gorm.DB, out *[]ShOrder) error {
			err := db.Raw("SELECT * FROM orders WHERE amount >= ?", am).Scan(out).Error
			sort.Slice(*out, func(i, j int) bool { return (*out)[i].ID < (*out)[j].ID })
			return err
		})
	case 10:
		users := []int64{u, e.user(), e.user()}
		return read("by users", fmt.Sprintf("Where(user_id IN %v).Order(id)", users), func(db *gorm.DB, out *[]ShOrder) error {
			return db.Where("user_id IN ?", users).Order("id").Find(out).Error
		})
	case 11:
		return read("count distinct", "Distinct(user_id).Count", func(db *gorm.DB, out *int64) error {
			return db.Model(&ShOrder{}).Distinct("user_id").Count(out).Error
		})
	case 12:
		return read("join items", fmt.Sprintf("orders JOIN order_items ON the key WHERE user_id = %d", u), func(db *gorm.DB, out *[]orderSku) error {
			return db.Table("orders").Select("orders.id, i.sku").
				Joins("JOIN order_items i ON i.user_id = orders.user_id AND i.order_id = orders.id").
				Where("orders.user_id = ?", u).Order("orders.id, i.sku").Scan(out).Error
		})
	case 13:
		return read("pluck page", fmt.Sprintf("Where(status = %q).Order(id).Limit(5).Pluck(id)", st), func(db *gorm.DB, out *[]int64) error {
			return db.Model(&ShOrder{}).Where("status = ?", st).Order("id").Limit(5).Pluck("id", out).Error
		})
	default:
		return read("raw by user", fmt.Sprintf("SELECT * WHERE user_id = %d ORDER BY id", u), func(db *gorm.DB, out *[]ShOrder) error {
			return db.Raw("SELECT * FROM orders WHERE user_id = ? ORDER BY id", u).Scan(out).Error
		})
	}
}

// randomOp: reads, writes and transactions.
func (e *diffEnv) randomOp() diffOp {
	switch r := e.rng.Intn(10); {
	case r < 4:
		return e.readOp(-1)
	case r < 9:
		return e.writeOp(e.user())
	default:
		return e.txOp()
	}
}

// regressions are the fixed operations run before the random ones: the
// shapes that were once wrong.
func (e *diffEnv) regressions() []diffOp {
	a := e.users[0]
	b := e.otherUser(a, false)
	var ops []diffOp
	// A raw upsert whose conflict clause's WHERE names another user than
	// the inserted row's was sent to that user's shard: the row was
	// stored on the wrong shard.
	if e.engine == "postgres" {
		e.note(7001)
		ops = append(ops, e.write("create given ID", fmt.Sprintf("Create(order 7001 of %d)", a), func(db *gorm.DB) *gorm.DB {
			return db.Create(&ShOrder{ID: 7001, UserID: a, Status: "new", Amount: 1})
		}))
		q := e.rawUpsert(fmt.Sprintf("orders.user_id = %d", a))
		for _, id := range []int64{7001, 7002, e.mint(b)} {
			id := id
			e.note(id)
			ops = append(ops, e.write("raw upsert", fmt.Sprintf("%s (%d, %d) [regression]", q, id, b), func(db *gorm.DB) *gorm.DB {
				return db.Exec(q, id, b, "paid", 2)
			}))
		}
	}
	// A Create given an ID minted for another user's bucket was accepted
	// on a lookup table: the row was then looked for by its ID on the
	// other user's shard (reads and writes by ID missed it).
	minted := e.mint(b)
	e.note(minted)
	o := ShOrder{ID: minted, UserID: a, Status: "new", Amount: 3}
	ops = append(ops,
		e.write("create given ID", fmt.Sprintf("Create(%+v) [regression: minted for %d]", o, b), func(db *gorm.DB) *gorm.DB { c := o; return db.Create(&c) }),
		read("first by ID", fmt.Sprintf("First(%d) [regression]", minted), func(db *gorm.DB, out *ShOrder) error { return db.First(out, minted).Error }),
		e.write("raw update by ID", fmt.Sprintf("UPDATE WHERE id = %d [regression]", minted), func(db *gorm.DB) *gorm.DB {
			return db.Exec("UPDATE orders SET amount = amount + 1 WHERE id = ?", minted)
		}),
	)
	// A merged GROUP BY on MariaDB shards grouped by the string "status"
	// (the plan's hidden group column in PostgreSQL's quotes): the groups
	// of every status came back as one.
	for i, st := range []string{"new", "paid"} {
		o := ShOrder{ID: int64(7100 + i), UserID: []int64{a, b}[i], Status: st, Amount: 5 + i}
		e.note(o.ID)
		ops = append(ops, e.write("create given ID", fmt.Sprintf("Create(%+v) [regression]", o), func(db *gorm.DB) *gorm.DB { c := o; return db.Create(&c) }))
	}
	// A transaction that deleted an order and saved it again, rolled
	// back, removed the order's lookup pair (the Save's insert had put it
	// "again"); a Create of its ID for a user of another shard then put a
	// second order of that ID there (MariaDB seed 1796546484879594614).
	// Likewise a same-user Create of a stored ID failing on the key.
	kept := ShOrder{ID: 7110, UserID: a, Status: "kept", Amount: 7}
	e.note(kept.ID)
	ops = append(ops,
		e.write("create given ID", fmt.Sprintf("Create(%+v) [regression]", kept), func(db *gorm.DB) *gorm.DB { c := kept; return db.Create(&c) }),
		e.write("create given ID", fmt.Sprintf("Create(%+v) again [regression: duplicate key]", kept), func(db *gorm.DB) *gorm.DB { c := kept; return db.Create(&c) }),
		e.write("create given ID", fmt.Sprintf("Create(order %d of %d) [regression: after a failed duplicate]", kept.ID, b), func(db *gorm.DB) *gorm.DB {
			return db.Create(&ShOrder{ID: kept.ID, UserID: b, Status: "copy", Amount: 1})
		}),
		diffOp{shape: "transaction", desc: fmt.Sprintf("transaction of user %d (rollback true): [Delete(%d) Save(%+v)] [regression]", a, kept.ID, kept), write: true,
			run: func(d diffSide) (any, int64, error) {
				err := d.forUser(a).Transaction(func(tx *gorm.DB) error {
					if err := tx.Delete(&ShOrder{}, kept.ID).Error; err != nil {
						return err
					}
					c := kept
					if err := tx.Save(&c).Error; err != nil {
						return err
					}
					return errDiffRollback
				})
				if errors.Is(err, errDiffRollback) {
					err = nil
				}
				return nil, 0, err
			}},
		e.write("create given ID", fmt.Sprintf("Create(order %d of %d) [regression: after a rolled-back Delete and Save]", kept.ID, b), func(db *gorm.DB) *gorm.DB {
			return db.Create(&ShOrder{ID: kept.ID, UserID: b, Status: "copy", Amount: 1})
		}),
	)
	ops = append(ops, e.readOp(7))
	return ops
}
