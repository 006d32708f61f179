package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

// Cuts between one process and a server. The first plugin instance (the
// cut one) reaches the store's Redis, and replica 0, through relays of its
// own; the redis-partition-one and replica-partition-one faults cut them
// for 0.5 to 2 s, drawn uniformly (longer than the soak's 1 s lease,
// soakLease, two times in three), alternately holding every byte both ways (Relay.Partition: a
// network dropping packets; what was sent arrives when it heals) and
// resetting every connection and refusing new ones (Relay.Refuse). The
// other instances keep writing and reading the same rows, by key and by
// whole table. A write the cut instance could not make safe is refused
// with plugin.ErrStoreUnreachable: the writer checks on a plain
// connection that the primary does not hold it (refusal).

// soakLease is the soak plugins' lease (plugin.Config.WriterLease): short,
// so that cuts outlast it. PublishTimeout keeps its default (1 s): with 300
// ms, on a loaded machine, publications to a reachable Redis timed out and
// writes committed late in the lease were left unprotected without any cut
// (freshread_writes_unprotected_total: 2 in a 40 s run under -race).
const soakLease = time.Second

// cutInstance is the plugin instance the cut faults cut.
const cutInstance = 0

// cuts are the cut instance's relays.
type cuts struct {
	store   *testcluster.Relay // to the single Redis; nil with Sentinel
	replica *testcluster.Relay // to replica 0 (as the others reach it)
}

// newCuts starts the cut instance's relays.
func newCuts(t testing.TB, c Cluster, st Store) cuts {
	var cs cuts
	if st.Redis != nil {
		host, port, err := net.SplitHostPort(st.Redis.Addr())
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			t.Fatal(err)
		}
		cs.store = newRelay(t, host, p)
	}
	host, port := c.replicaAddr()
	cs.replica = newRelay(t, host, port)
	return cs
}

// storeSpec is how instance i reaches the store.
func (cs cuts) storeSpec(st Store, i int) storeSpec {
	sp := st.spec()
	if i == cutInstance && cs.store != nil {
		sp.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(cs.store.Port()))
		sp.Cut = true
	}
	return sp
}

// replicaDSNs are the replicas' DSNs for instance i.
func (cs cuts) replicaDSNs(c Cluster, db string, i int) []string {
	if i == cutInstance {
		return c.replicaDSNsVia(db, cs.replica.Port())
	}
	_, _, rs := c.DSNs(db)
	return rs
}

// faults are the cut faults.
func (cs cuts) faults() []Fault {
	var out []Fault
	if cs.store != nil {
		out = append(out, cutFault("redis-partition-one", cs.store))
	}
	return append(out, cutFault("replica-partition-one", cs.replica))
}

// cutFault cuts r for 0.5 to 2 s, holding every byte and resetting in
// turn.
func cutFault(name string, r *testcluster.Relay) Fault {
	var mu sync.Mutex
	var held, reset, pastLease int
	var lasts time.Duration
	return Fault{Name: name,
		Lasts: func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			lasts = 500*time.Millisecond + rand.N(1500*time.Millisecond)
			if lasts > soakLease {
				pastLease++
			}
			return lasts
		},
		Inject: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if (held+reset)%2 == 0 {
				held++
				r.Partition(true)
			} else {
				reset++
				r.Refuse(true)
			}
			return nil
		},
		Heal: func(context.Context) error {
			r.Partition(false)
			r.Refuse(false)
			return nil
		},
		Note: func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("cuts of the first instance: %d holding every byte, %d resetting; %d longer than its lease (%v)", held, reset, pastLease, soakLease)
		}}
}

// Refusal is a write refused with plugin.ErrStoreUnreachable, and what
// the primary held afterwards: Committed when it held the write's version
// (it must not), Verified false when that could not be read.
type Refusal struct {
	Write
	Verified, Committed bool
}

// openPlain opens database db on the primary without the plugin (to read
// back refused writes).
func openPlain(t testing.TB, primary gorm.Dialector) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(primary, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	})
	return db
}

// failedWrite records a write that returned err: a refusal, read back on
// plain (its key has no other writer, and a refused write was never sent,
// so the primary holds it now or never), or a write of unknown outcome.
func failedWrite(ctx context.Context, plain *gorm.DB, rec *recorder, w Write, err error, what string) {
	if !errors.Is(err, plugin.ErrStoreUnreachable) {
		rec.err(fmt.Errorf("%s: %w", what, err))
		rec.mu.Lock()
		rec.unknown = append(rec.unknown, w)
		rec.mu.Unlock()
		return
	}
	ref := Refusal{Write: w}
	var v int64
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	rerr := plain.WithContext(octx).Raw("SELECT version FROM soak_rows WHERE id = ?", w.Key).Scan(&v).Error
	cancel()
	if rerr == nil {
		ref.Verified, ref.Committed = true, v == w.Version
	}
	rec.mu.Lock()
	rec.refused = append(rec.refused, ref)
	if !ref.Verified {
		rec.unknown = append(rec.unknown, w)
	}
	rec.mu.Unlock()
}

// leaseCounters sums the plugins' freshread_writes_fenced_total and
// freshread_writes_unprotected_total.
func leaseCounters(ps []*plugin.Plugin) (fenced, unprotected int) {
	for _, p := range ps {
		reg := prometheus.NewRegistry()
		if err := reg.Register(freshreadprom.Plugin(p)); err != nil {
			continue
		}
		mfs, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "freshread_writes_fenced_total":
					fenced += int(m.GetCounter().GetValue())
				case "freshread_writes_unprotected_total":
					unprotected += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return fenced, unprotected
}
