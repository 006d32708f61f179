package integration_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

// throughRelay opens e's first replica through a relay that the test can
// stall (every answer of the server held, connections left open), and
// returns the plugin's Replicas for it.
func (e *env) throughRelay() (*testcluster.Relay, []plugin.Replica) {
	e.t.Helper()
	var target, dsn string
	if e.pg != nil {
		target = fmt.Sprintf("%s:%d", e.pg.Host(), e.pg.ReplicaPort(0))
		dsn = e.pg.ReplicaDSN(0, e.dbName)
	} else {
		m := e.c.(mariaCluster)
		target = fmt.Sprintf("%s:%d", m.Host(), m.ReplicaPort())
		dsn = m.ReplicaDSN(e.dbName)
	}
	relay, err := testcluster.NewRelay(target)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { relay.Close() })
	via := fmt.Sprintf("127.0.0.1:%d", relay.Port())
	var d gorm.Dialector
	if e.pg != nil {
		u, err := url.Parse(dsn)
		if err != nil {
			e.t.Fatal(err)
		}
		u.Host = via
		d = postgres.Open(u.String())
	} else {
		cfg, err := mysqldrv.ParseDSN(dsn)
		if err != nil {
			e.t.Fatal(err)
		}
		cfg.Addr = via
		d = mysql.Open(cfg.FormatDSN())
	}
	return relay, []plugin.Replica{{Name: replicaName(0), Dialector: d}}
}

// decisionsWith counts the decisions of reason recorded so far.
func (e *env) decisionsWith(reason plugin.Reason) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, d := range e.decisions {
		if d.Reason == reason {
			n++
		}
	}
	return n
}

// TestStalledReplicaAbandoned: a replica that stops answering without
// breaking its connections (every answer held by a relay) does not hold a
// read: the read is served by the primary with the right data, though its
// context would let it wait a minute, the replica is marked down, and
// reads come back to it once it answers again. With the stall check off
// the same read waits for its context. Both engines.
func TestStalledReplicaAbandoned(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			e := newEngineEnv(t, engine)
			if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
				t.Fatal(err)
			}
			e.waitCaughtUp()
			relay, replicas := e.throughRelay()
			db, _ := e.open(withConfig(func(c *plugin.Config) { c.Replicas = replicas }))
			e.eventuallyReplica(func() served { return e.readItem(db, 1) }, "before the stall")

			relay.Stall(true)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			got := e.readItem(db.WithContext(ctx), 1)
			if got.Name != "old" {
				t.Fatalf("read during the stall: %+v, want item 1 \"old\"", got)
			}
			e.mustPrimary(got, "read during the stall")
			if ctx.Err() != nil {
				t.Fatal("the read ended with its context: it waited on the stalled replica")
			}
			e.mustHaveDecision(plugin.ReasonReplicaStalled)
			// Marked down: the next read does not try the replica.
			stalled := e.decisionsWith(plugin.ReasonReplicaStalled)
			e.mustPrimary(e.readItem(db.WithContext(ctx), 1), "read after the stall was found")
			if n := e.decisionsWith(plugin.ReasonReplicaStalled); n != stalled {
				t.Fatalf("a read after the replica was found stalled was sent to it again (%d stalled reads, want %d)", n, stalled)
			}

			relay.Stall(false)
			e.eventuallyReplica(func() served { return e.readItem(db, 1) }, "after the stall")

			// Off: the read waits on the stalled replica until its context
			// ends.
			off, _ := e.open(withConfig(func(c *plugin.Config) {
				c.Replicas = replicas
				c.StallTimeout = -1
			}))
			e.eventuallyReplica(func() served { return e.readItem(off, 1) }, "before the second stall")
			relay.Stall(true)
			short, cancelShort := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancelShort()
			var s served
			err := off.WithContext(short).Model(&Item{}).Select("name, version, "+e.c.portExpr()+" AS port").Where("id = ?", 1).Scan(&s).Error
			if err == nil {
				t.Fatalf("StallTimeout -1: the read returned %+v during the stall; the test proves nothing", s)
			}
			relay.Stall(false)
		})
	}
}

// TestSlowReplicaReadNotAbandoned: a read that takes longer than
// StallTimeout on a replica that answers pings (a heavy query, not a
// stall) stays on the replica. Both engines.
func TestSlowReplicaReadNotAbandoned(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			e := newEngineEnv(t, engine, withConfig(func(c *plugin.Config) { c.StallTimeout = 200 * time.Millisecond }))
			if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
				t.Fatal(err)
			}
			e.waitCaughtUp()
			e.eventuallyReplica(func() served { return e.readItem(e.db, 1) }, "before the slow read")
			sleep := "(SELECT true FROM pg_sleep(1))"
			if e.pg == nil {
				sleep = "SLEEP(1) = 0"
			}
			var s served
			err := e.db.Model(&Item{}).Select("name, version, "+e.c.portExpr()+" AS port").Where("id = ? AND "+sleep, 1).Scan(&s).Error
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != "old" {
				t.Fatalf("slow read: %+v, want item 1 \"old\"", s)
			}
			if n := e.decisionsWith(plugin.ReasonReplicaStalled); n != 0 {
				t.Fatalf("a slow read on a replica that answers pings was taken for a stall (%d)", n)
			}
			e.mustReplica(s, "a read slower than StallTimeout")
		})
	}
}
