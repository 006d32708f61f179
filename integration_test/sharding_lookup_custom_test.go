package integration_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/freshread/freshread/sharding"
)

// barrierLookup is a memLookup whose Resolve calls meet in pairs: each
// waits (up to a second) for the next one, so two racing Creates read the
// lookup at the same moment each time either reads it.
type barrierLookup struct {
	memLookup
	bmu     sync.Mutex
	arrived int
}

func (l *barrierLookup) Resolve(ctx context.Context, ids []int64) (map[int64]int64, error) {
	l.bmu.Lock()
	l.arrived++
	pair := (l.arrived + 1) / 2 // calls 1 and 2 meet, then 3 and 4, ...
	l.bmu.Unlock()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		l.bmu.Lock()
		met := l.arrived >= 2*pair
		l.bmu.Unlock()
		if met {
			break
		}
	}
	return l.memLookup.Resolve(ctx, ids)
}

// With a Lookup that implements no LookupFresh, two Creates of one new ID
// for one user race: one stores its row, the other fails on the duplicate
// key. The failing one must not remove the pair from under the stored
// row: without it, another user's Create of that ID lands on another
// shard, one ID on two shards. Before, each Create read the lookup
// (Resolve) before its Put, both took the pair for new, and the loser
// removed it.
func TestShardingCustomLookupKeepsPairsOfFailedCreate(t *testing.T) {
	look := &barrierLookup{memLookup: memLookup{m: map[int64]int64{}}}
	e := newShEnv(t, withLookup(look))
	a, b, _, _ := keyChangeUsers(t, e)
	const id = 7700
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.db.Create(&ShOrder{ID: id, UserID: a, Status: "racer"}).Error
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("racing Creates returned %v and %v, want exactly one success", errs[0], errs[1])
	}
	got, err := look.Resolve(context.Background(), []int64{id})
	if err != nil {
		t.Fatal(err)
	}
	if got[id] != a {
		t.Fatalf("the stored order %d has lookup pair %v, want user %d: the failed Create removed it", id, got, a)
	}
	err = e.db.Create(&ShOrder{ID: id, UserID: b, Status: "thief"}).Error
	if !errors.Is(err, sharding.ErrIDInUse) {
		t.Fatalf("another user's Create of the stored ID: %v, want ErrIDInUse", err)
	}
	n := 0
	for _, rows := range e.shardRows() {
		for _, r := range rows {
			if r.ID == id {
				n++
			}
		}
	}
	if n != 1 {
		t.Fatalf("order %d is stored %d times over the shards, want once", id, n)
	}
}
