package sharding

import (
	"context"
	"errors"
	"fmt"
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
	l.put, l.gone = nil, nil
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
