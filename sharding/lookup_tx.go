package sharding

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
//   - the pairs a Create recorded anew are deleted again when its
//     transaction rolls back (or its statement fails outside one): a pair
//     left behind would route its ID to the wrong shard once another row
//     of that ID is inserted on another shard, hiding it. A pair that
//     existed before (the row did: a Save, a retried Create, a Create of
//     an ID the transaction had deleted) stays: without it, another
//     user's Create could take the ID, one ID on two shards.
//   - the pairs of the rows a Delete removed are deleted only once its
//     transaction commits, and only when no later Create of the
//     transaction put the ID back: a rollback keeps the rows, and their
//     pairs.
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

// txLookup is what one transaction did to the lookup: its Creates and
// Deletes in order (ops, less what was rolled back to a savepoint), and
// the IDs whose pairs it recorded anew (fresh: no pair existed before).
// A pair that existed before the transaction belongs to a row that
// existed before it: the transaction's end may remove only what the
// transaction made true, never that.
type txLookup struct {
	mu    sync.Mutex
	lk    Lookup
	ops   []lookupOp
	fresh map[int64]bool
	marks []lookupMark // the savepoints open, with len(ops) at each
}

// lookupOp is a Create (gone false) or Delete (gone true) of one order ID
// in a transaction.
type lookupOp struct {
	id   int64
	gone bool
}

// lookupMark is a savepoint of a transaction (txLookup.marks).
type lookupMark struct {
	name string
	ops  int
}

// savepoint records a SAVEPOINT name.
func (l *txLookup) savepoint(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marks = append(l.marks, lookupMark{name: name, ops: len(l.ops)})
}

// rollbackTo records a ROLLBACK TO SAVEPOINT name: the Creates and
// Deletes since are undone. Without this, a Delete rolled back to a
// savepoint removed, at commit, the pair of a row still stored, and a
// later Create could give its ID to another user's order on another
// shard.
func (l *txLookup) rollbackTo(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.marks) - 1; i >= 0; i-- {
		m := l.marks[i]
		if m.name != name {
			continue
		}
		l.ops = l.ops[:m.ops]
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

// toDeleteLocked is the pairs the transaction's end removes. Rolled back, the
// lookup returns to what it was before: the pairs recorded anew go.
// Committed, a pair goes when the last Create or Delete of its ID that
// stands was a Delete, or when none stands and its pair was recorded
// anew (a Create rolled back to a savepoint). l.mu is held.
func (l *txLookup) toDeleteLocked(committed bool) []int64 {
	var ids []int64
	if !committed {
		for id := range l.fresh {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids
	}
	last := make(map[int64]bool, len(l.ops))
	for _, op := range l.ops {
		last[op.id] = op.gone
	}
	for id, gone := range last {
		if gone {
			ids = append(ids, id)
		}
	}
	for id := range l.fresh {
		if _, stands := last[id]; !stands {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
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

// addPut records a Create of ids, fresh those whose pairs its Put
// recorded anew.
func (l *txLookup) addPut(lk Lookup, ids, fresh []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lk = lk
	for _, id := range ids {
		l.ops = append(l.ops, lookupOp{id: id})
	}
	for _, id := range fresh {
		if l.fresh == nil {
			l.fresh = map[int64]bool{}
		}
		l.fresh[id] = true
	}
}

// addGone records a Delete of the rows of ids.
func (l *txLookup) addGone(lk Lookup, ids []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lk = lk
	for _, id := range ids {
		l.ops = append(l.ops, lookupOp{id: id, gone: true})
	}
}

// lookupSettleTimeout bounds the lookup call a transaction's end makes.
const lookupSettleTimeout = 5 * time.Second

// settle applies the transaction's end to the lookup (toDeleteLocked).
// The error says what could not be undone (the transaction's own outcome
// stands).
func (l *txLookup) settle(ctx context.Context, committed bool) error {
	l.mu.Lock()
	lk, ids := l.lk, l.toDeleteLocked(committed)
	l.ops, l.fresh, l.marks = nil, nil, nil
	l.mu.Unlock()
	if lk == nil || len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupSettleTimeout)
	defer cancel()
	if err := lk.Delete(ctx, ids); err != nil {
		what := "the pairs the rolled-back transaction put"
		if committed {
			what = "the pairs of the rows the transaction deleted or rolled back"
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
// transaction (undone if it rolls back); outside one, undo undoes those
// it recorded anew when the insert fails. minted: every ID was minted by
// this statement, so every pair is new (one Put, no check).
func (s *Sharding) putPairs(stmt *gorm.Statement, table string, pairs []Pair, minted bool) (undo func(error), err error) {
	fresh, err := s.putLookup(stmt.Context, pairs, minted)
	if err != nil {
		return nil, fmt.Errorf("sharding: write the lookup of %q: %w", table, err)
	}
	if l := txLookupOf(stmt); l != nil {
		l.addPut(s.cfg.Lookup, pairIDs(pairs), fresh)
		return func(error) {}, nil
	}
	return func(insertErr error) {
		if insertErr == nil || !definitelyFailed(insertErr) || len(fresh) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(stmt.Context), lookupSettleTimeout)
		defer cancel()
		_ = s.cfg.Lookup.Delete(ctx, fresh) // left behind, it is found stale when it misroutes (lookup_stale.go)
	}, nil
}

// putLookup is Lookup.Put, returning the IDs whose pairs it recorded anew:
// all of them when minted (IDs minted just now are new); else as the
// Lookup says (LookupFresh). A Lookup that cannot say counts none as new:
// a Resolve before its Put could tell two racing Creates of one ID for one
// user that the pair is new, and the one that then fails would remove the
// pair from under the other's row, letting another user's Create take its
// ID. The pair of a Create that failed stays instead: it routes its ID to
// a shard where no row has it (a read by that ID finds nothing, as it
// should), and another user's Create of that ID is refused (ErrIDInUse).
func (s *Sharding) putLookup(ctx context.Context, pairs []Pair, minted bool) (fresh []int64, err error) {
	if lf, ok := s.cfg.Lookup.(LookupFresh); ok && !minted {
		return lf.PutFresh(ctx, pairs)
	}
	if err := s.cfg.Lookup.Put(ctx, pairs); err != nil {
		return nil, err
	}
	if minted {
		return pairIDs(pairs), nil
	}
	return nil, nil
}

// pairIDs is the order IDs of pairs.
func pairIDs(pairs []Pair) []int64 {
	ids := make([]int64, len(pairs))
	for i, p := range pairs {
		ids[i] = p.OrderID
	}
	return ids
}

// definitelyFailed reports whether a statement's error means it did not
// commit (sqlerr.Refused).
func definitelyFailed(err error) bool {
	return sqlerr.Refused(err) || errors.Is(err, errNotCommitted)
}
