package sharding

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/lib/sqlerr"
)

// Lookup pairs follow transactions. A Create writes its rows' (ID, user)
// pairs to the lookup before it inserts them (an order never exists
// without its pair); a Delete removes the pairs of the rows it deleted.
// Inside a transaction the rows only exist once it commits, so:
//
//   - the pairs a Create put are deleted again when its transaction rolls
//     back (or its statement fails outside one): a pair left behind would
//     route its ID to the wrong shard once another row of that ID is
//     inserted on another shard, hiding it. A missing pair is safe: an
//     unknown ID is looked for on every shard.
//   - the pairs of the rows a Delete removed are deleted only once its
//     transaction commits: a rollback keeps the rows, and their pairs.
//
// When undoing fails (the lookup unreachable), the pairs stay. A
// statement that such a pair routed to the wrong shard misses the order;
// the plugin then has the pair checked against the lookup's table and
// routes the statement again, or, inside a transaction, returns
// ErrStaleLookup (lookup_stale.go).

// ErrIDInUse is returned (wrapped) by a Create given an order ID that the
// lookup records for another user: the order exists, or existed, on that
// user's shard, and a second row with its ID would be hidden from reads
// by ID (or hide it). Nothing is written. Config.Lookup's Put returns it.
var ErrIDInUse = errors.New("sharding: the order ID belongs to another user")

// txLookup is what one transaction did to the lookup.
type txLookup struct {
	mu   sync.Mutex
	lk   Lookup
	put  []int64 // IDs whose pairs it put
	gone []int64 // IDs whose rows it deleted
	// undone: IDs whose pairs a part of the transaction rolled back to a
	// savepoint put (their rows are gone with it); marks: the savepoints
	// open, with how much of put and gone came before each.
	undone []int64
	marks  []lookupMark
}

// lookupMark is a savepoint of a transaction (txLookup.marks).
type lookupMark struct {
	name      string
	put, gone int
}

// savepoint records a SAVEPOINT name.
func (l *txLookup) savepoint(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marks = append(l.marks, lookupMark{name: name, put: len(l.put), gone: len(l.gone)})
}

// rollbackTo records a ROLLBACK TO SAVEPOINT name: the rows deleted since
// are back (their pairs stay), the rows created since are gone (their
// pairs go, whatever the transaction's outcome). Without this, a Delete
// rolled back to a savepoint removed, at commit, the pair of a row still
// stored, and a later Create could give its ID to another user's order on
// another shard.
func (l *txLookup) rollbackTo(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.marks) - 1; i >= 0; i-- {
		m := l.marks[i]
		if m.name != name {
			continue
		}
		l.undone = append(l.undone, l.put[m.put:]...)
		l.put, l.gone = l.put[:m.put], l.gone[:m.gone]
		l.marks = l.marks[:i+1] // the savepoint stays, as in SQL
		return
	}
}

// release records a RELEASE SAVEPOINT name: what came after it stays.
func (l *txLookup) release(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.marks) - 1; i >= 0; i-- {
		if l.marks[i].name == name {
			l.marks = l.marks[:i]
			return
		}
	}
}

// txLookupOf is the lookup record of the transaction stmt runs in; nil
// outside a transaction the router began.
func txLookupOf(stmt *gorm.Statement) *txLookup {
	switch c := stmt.ConnPool.(type) {
	case *shardTx:
		return &c.lookup
	case *lazyTx:
		return &c.lookup
	}
	return nil
}

func (l *txLookup) addPut(lk Lookup, pairs []Pair) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lk = lk
	for _, p := range pairs {
		l.put = append(l.put, p.OrderID)
	}
}

func (l *txLookup) addGone(lk Lookup, ids []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lk = lk
	l.gone = append(l.gone, ids...)
}

// lookupSettleTimeout bounds the lookup call a transaction's end makes.
const lookupSettleTimeout = 5 * time.Second

// settle applies the transaction's end to the lookup: committed, the
// deleted rows' pairs go; rolled back, the pairs it put go. The error
// says what could not be undone (the transaction's own outcome stands).
func (l *txLookup) settle(ctx context.Context, committed bool) error {
	l.mu.Lock()
	lk, ids := l.lk, l.put
	if committed {
		ids = l.gone
	}
	ids = append(append([]int64(nil), ids...), l.undone...)
	l.put, l.gone, l.undone, l.marks = nil, nil, nil, nil
	l.mu.Unlock()
	if lk == nil || len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupSettleTimeout)
	defer cancel()
	if err := lk.Delete(ctx, ids); err != nil {
		what := "the pairs the rolled-back transaction put"
		if committed {
			what = "the pairs of the rows the transaction deleted"
		}
		return fmt.Errorf("sharding: delete %s from the lookup: %w", what, err)
	}
	return nil
}

// followSavepoint applies a statement that sets, rolls back to or
// releases a savepoint (GORM's SavePoint and RollbackTo, and nested
// db.Transaction calls, send them as raw SQL) to the lookup record of the
// transaction it runs in.
func followSavepoint(stmt *gorm.Statement) {
	l := txLookupOf(stmt)
	if l == nil || stmt.SQL.Len() > 256 {
		return // no transaction, or longer than any savepoint statement GORM sends
	}
	w := strings.Fields(stmt.SQL.String())
	if len(w) < 2 || len(w) > 4 {
		return
	}
	name := strings.ToLower(strings.Trim(strings.TrimSuffix(w[len(w)-1], ";"), "\"`"))
	switch kw := strings.ToUpper(strings.Join(w[:len(w)-1], " ")); kw {
	case "SAVEPOINT":
		l.savepoint(name)
	case "ROLLBACK TO SAVEPOINT", "ROLLBACK TO":
		l.rollbackTo(name)
	case "RELEASE SAVEPOINT", "RELEASE":
		l.release(name)
	}
}

// putPairs writes a Create's pairs before its rows, recording them on its
// transaction (undone if it rolls back); outside one, undo undoes them
// when the insert fails.
func (s *Sharding) putPairs(stmt *gorm.Statement, table string, pairs []Pair) (undo func(error), err error) {
	if err := s.cfg.Lookup.Put(stmt.Context, pairs); err != nil {
		return nil, fmt.Errorf("sharding: write the lookup of %q: %w", table, err)
	}
	if l := txLookupOf(stmt); l != nil {
		l.addPut(s.cfg.Lookup, pairs)
		return func(error) {}, nil
	}
	return func(insertErr error) {
		if insertErr == nil || !definitelyFailed(insertErr) {
			return
		}
		ids := make([]int64, len(pairs))
		for i, p := range pairs {
			ids[i] = p.OrderID
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(stmt.Context), lookupSettleTimeout)
		defer cancel()
		_ = s.cfg.Lookup.Delete(ctx, ids) // left behind, it is found stale when it misroutes (lookup_stale.go)
	}, nil
}

// definitelyFailed reports whether a statement's error means it did not
// commit (sqlerr.Refused).
func definitelyFailed(err error) bool { return sqlerr.Refused(err) }
