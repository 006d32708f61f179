package integration_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// keyChangeUsers returns a user a, a user b on another shard, a user c on
// a's shard in another bucket, and a's bucket twin (a + 1024: same bucket).
func keyChangeUsers(t *testing.T, e *shEnv) (a, b, c, twin int64) {
	t.Helper()
	a = 1
	for u := int64(2); b == 0 || c == 0; u++ {
		switch {
		case b == 0 && e.s.ShardOf(u) != e.s.ShardOf(a):
			b = u
		case c == 0 && e.s.ShardOf(u) == e.s.ShardOf(a) && u%1024 != a%1024:
			c = u
		}
		if u > 4096 {
			t.Fatal("no users for the test")
		}
	}
	return a, b, c, a + 1024
}

// shardRows reads every order of every shard from its primary directly.
func (e *shEnv) shardRows() map[string][]ShOrder {
	e.t.Helper()
	out := map[string][]ShOrder{}
	for _, name := range e.names {
		var rows []ShOrder
		if err := e.direct[name].Order("id").Find(&rows).Error; err != nil {
			e.t.Fatal(err)
		}
		out[name] = rows
	}
	return out
}

// withLookupTable routes order IDs through st, which records every order.
func withLookupTable(st sharding.Lookup) shOpt {
	return func(c *sharding.Config) { c.Lookup, c.Tables[0].Lookup = st, true }
}

// mustCreate creates each order through the plugin.
func (e *shEnv) mustCreate(orders ...*ShOrder) {
	e.t.Helper()
	for _, o := range orders {
		if err := e.db.Create(o).Error; err != nil {
			e.t.Fatal(err)
		}
	}
}

// saveAs saves o with another user.
func (e *shEnv) saveAs(o ShOrder, user int64) error {
	o.UserID, o.Status = user, "moved"
	return e.db.Save(&o).Error
}

// upsertAs creates order id for user with the conflict clause oc.
func (e *shEnv) upsertAs(oc clause.OnConflict, id, user int64) error {
	return e.db.Clauses(oc).Create(&ShOrder{ID: id, UserID: user, Status: "moved"}).Error
}

// refuseAll runs each statement and checks it fails with
// ErrShardKeyChange and leaves every shard's rows as they were.
func refuseAll(t *testing.T, e *shEnv, cases map[string]func() error) {
	t.Helper()
	before := e.shardRows()
	for name, run := range cases {
		if err := run(); !errors.Is(err, sharding.ErrShardKeyChange) {
			t.Errorf("%s: %v, want ErrShardKeyChange", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
		if after := e.shardRows(); !reflect.DeepEqual(after, before) {
			t.Fatalf("%s changed the shards:\n before %v\n after  %v", name, before, after)
		}
	}
}

// The shard key of a stored order never changes to another shard's (nor
// to a value the plugin cannot prove keeps the row's placement): raw and
// GORM updates, Save, upserts are refused before anything is written;
// writes that keep the key work. Minted IDs, no lookup.
func TestShardingKeyChangeMinted(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 15)))
	a, b, c, twin := keyChangeUsers(t, e)
	o, other := ShOrder{UserID: a, Status: "kc", Amount: 1}, ShOrder{UserID: b, Status: "kc-b", Amount: 2}
	e.mustCreate(&o, &other)
	home := e.s.ShardOf(a)
	refuseAll(t, e, map[string]func() error{
		"raw UPDATE by minted ID": func() error {
			return e.db.Exec("UPDATE orders SET user_id = ? WHERE id = ?", b, o.ID).Error
		},
		"raw UPDATE by key": func() error {
			return e.db.Exec("UPDATE orders SET user_id = $1 WHERE user_id = $2", b, a).Error
		},
		"raw UPDATE to a user of the same shard": func() error {
			return e.db.Exec("UPDATE orders SET user_id = ? WHERE id = ?", c, o.ID).Error
		},
		"raw UPDATE with an expression": func() error {
			return e.db.Exec("UPDATE orders SET user_id = user_id + 1 WHERE id = ?", o.ID).Error
		},
		"Update": func() error {
			cp := o
			return e.db.Model(&cp).Update("user_id", b).Error
		},
		"Update by key to a user of the same shard": func() error {
			return e.db.Model(&ShOrder{}).Where("user_id = ?", a).Update("user_id", c).Error
		},
		"Update with an expression": func() error {
			cp := o
			return e.db.Model(&cp).Update("user_id", gorm.Expr("user_id + ?", 1)).Error
		},
		"Update with a subquery": func() error {
			cp := o
			return e.db.Model(&cp).Update("user_id", e.db.Model(&ShOrder{}).Select("max(user_id)")).Error
		},
		"Updates": func() error {
			cp := o
			return e.db.Model(&cp).Updates(ShOrder{UserID: b, Status: "moved"}).Error
		},
		"Updates with a map": func() error {
			cp := o
			return e.db.Model(&cp).Updates(map[string]any{"user_id": b, "status": "moved"}).Error
		},
		"Save with another shard's user":                    func() error { return e.saveAs(o, b) },
		"Save with another bucket's user of the same shard": func() error { return e.saveAs(o, c) },
		"upsert UpdateAll":                                  func() error { return e.upsertAs(clause.OnConflict{UpdateAll: true}, o.ID, b) },
		"upsert DoNothing":                                  func() error { return e.upsertAs(clause.OnConflict{DoNothing: true}, o.ID, b) },
		"upsert DoUpdates of the key, same shard": func() error {
			return e.db.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "id"}}, DoUpdates: clause.AssignmentColumns([]string{"user_id", "status"})}).
				Create(&ShOrder{ID: o.ID, UserID: c, Status: "moved"}).Error
		},
		"upsert on another conflict target": func() error {
			return e.db.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "status"}}, UpdateAll: true}).
				Create(&ShOrder{UserID: a, Status: "moved"}).Error
		},
		"Save of a slice": func() error {
			return e.db.Save(&[]ShOrder{{ID: o.ID, UserID: b, Status: "moved"}}).Error
		},
		"Save of a slice, two orders swapping users": func() error {
			return e.db.Save(&[]ShOrder{{ID: o.ID, UserID: b, Status: "moved"}, {ID: other.ID, UserID: a, Status: "moved"}}).Error
		},
		"raw upsert assigning the key": func() error {
			return e.db.Clauses(sharding.Shard(home)).Exec(
				"INSERT INTO orders (id, user_id, status, amount) VALUES (?, ?, 'moved', 0) ON CONFLICT (id) DO UPDATE SET user_id = EXCLUDED.user_id",
				o.ID, a).Error
		},
		"Update in a transaction": func() error {
			return e.s.ForUser(e.db, a).Transaction(func(tx *gorm.DB) error {
				cp := o
				return tx.Model(&cp).Update("user_id", b).Error
			})
		},
	})

	// What keeps the key works, and lands where it should.
	allowed := []struct {
		name string
		run  func() error
	}{
		{"Save unchanged", func() error { o.Status = "kc-saved"; return e.db.Save(&o).Error }},
		{"Update of another column", func() error { return e.db.Model(&o).Update("amount", 5).Error }},
		{"Updates with the same user", func() error { return e.db.Model(&o).Updates(ShOrder{UserID: a, Amount: 6}).Error }},
		{"raw UPDATE naming the key", func() error {
			return e.db.Exec("UPDATE orders SET user_id = ?, amount = 7 WHERE user_id = ? AND id = ?", a, a, o.ID).Error
		}},
		{"Save of a slice unchanged", func() error { return e.db.Save(&[]ShOrder{o}).Error }},
		{"upsert UpdateAll unchanged", func() error {
			return e.db.Clauses(clause.OnConflict{UpdateAll: true}).Create(&ShOrder{ID: o.ID, UserID: a, Status: "kc-up", Amount: 7}).Error
		}},
	}
	for _, c := range allowed {
		if err := c.run(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	rows := e.shardRows()
	for name, rs := range rows {
		for _, r := range rs {
			if r.ID == o.ID && (name != home || r.UserID != a || r.Status != "kc-up" || r.Amount != 7) {
				t.Fatalf("order on %s: %+v, want user %d, kc-up, 7 on %s", name, r, a, home)
			}
		}
	}
	if got := e.statusOn("kc-up"); len(got) != 1 || got[home] != 1 {
		t.Fatalf("order after the allowed writes: %v, want one on %s", got, home)
	}
	// The bucket twin: same bucket, so the minted ID, the row and its
	// placement stay consistent; allowed without a lookup.
	if err := e.db.Model(&o).Update("user_id", twin).Error; err != nil {
		t.Fatalf("update to the bucket twin: %v", err)
	}
	var got []ShOrder
	if err := e.db.Where("user_id = ?", twin).Find(&got).Error; err != nil || len(got) != 1 || got[0].ID != o.ID {
		t.Fatalf("read by the twin: %+v %v", got, err)
	}
	var byID ShOrder
	if err := e.db.First(&byID, o.ID).Error; err != nil || byID.UserID != twin {
		t.Fatalf("read by ID: %+v %v", byID, err)
	}
}

// With the lookup (IDs the application chose, or any ID of a table whose
// lookup records it), the lookup's user is the row's: an update or upsert
// is allowed only when it keeps that user, and the lookup pair is not
// rewritten by a refused upsert.
func TestShardingKeyChangeLookup(t *testing.T) {
	st, _, _ := newLookup(t, testcluster.PostgresFor(t))
	e := newShEnv(t, withLookupTable(st))
	a, b, c, twin := keyChangeUsers(t, e)
	o := ShOrder{ID: 5001, UserID: a, Status: "kl", Amount: 1}
	e.mustCreate(&o)
	home := e.s.ShardOf(a)
	refuseAll(t, e, map[string]func() error{
		"raw UPDATE by lookup ID": func() error {
			return e.db.Exec("UPDATE orders SET user_id = ? WHERE id = ?", b, o.ID).Error
		},
		"Update": func() error {
			cp := o
			return e.db.Model(&cp).Update("user_id", b).Error
		},
		"Save with another shard's user":     func() error { return e.saveAs(o, b) },
		"Save with a user of the same shard": func() error { return e.saveAs(o, c) },
		"Save with the bucket twin":          func() error { return e.saveAs(o, twin) },
		"upsert UpdateAll":                   func() error { return e.upsertAs(clause.OnConflict{UpdateAll: true}, o.ID, b) },
		"upsert UpdateAll, same shard":       func() error { return e.upsertAs(clause.OnConflict{UpdateAll: true}, o.ID, c) },
		"Save of a slice": func() error {
			return e.db.Save(&[]ShOrder{{ID: o.ID, UserID: b, Status: "moved"}}).Error
		},
	})
	users, err := st.Resolve(context.Background(), []int64{o.ID})
	if err != nil || users[o.ID] != a {
		t.Fatalf("lookup of %d after the refusals: %v %v, want user %d", o.ID, users, err, a)
	}
	o.Status = "kl-saved"
	if err := e.db.Save(&o).Error; err != nil {
		t.Fatalf("Save unchanged: %v", err)
	}
	if err := e.db.Save(&[]ShOrder{o}).Error; err != nil {
		t.Fatalf("Save of a slice unchanged: %v", err)
	}
	if err := e.db.Exec("UPDATE orders SET user_id = ?, amount = 3 WHERE id = ?", a, o.ID).Error; err != nil {
		t.Fatalf("raw UPDATE keeping the user: %v", err)
	}
	if got := e.statusOn("kl-saved"); len(got) != 1 || got[home] != 1 {
		t.Fatalf("order after the allowed writes: %v, want one on %s", got, home)
	}
}
