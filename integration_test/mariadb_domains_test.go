package integration_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

// domainCluster is the MariaDB pair with every connection to the primary
// writing in GTID domain `domain` (SET SESSION gtid_domain_id, through the
// DSN), as an application that sets gtid_domain_id per session does. The
// server's own @@GLOBAL.gtid_domain_id stays 0.
type domainCluster struct {
	mariaCluster
	domain uint32
}

func (c domainCluster) primary(db string) gorm.Dialector {
	cfg, err := gomysql.ParseDSN(c.PrimaryDSN(db))
	if err != nil {
		panic(err) // the harness's own DSN
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["gtid_domain_id"] = strconv.FormatUint(uint64(c.domain), 10)
	return mysql.Open(cfg.FormatDSN())
}

func newMariaDomainEnv(t *testing.T, domain uint32, opts ...envOpt) *env {
	t.Helper()
	return newEnvOn(t, domainCluster{mariaCluster{testcluster.MariaDBFor(t)}, domain}, nil, opts...)
}

// checkDomainWrites checks that the application's writes landed in the
// domain, not in domain 0: otherwise the tests below prove nothing.
func checkDomainWrites(t *testing.T, e *env, domain uint32) {
	t.Helper()
	var last string
	err := e.db.Connection(func(tx *gorm.DB) error {
		if err := tx.Exec("UPDATE others SET note = 'domain check' WHERE id = 1").Error; err != nil {
			return err
		}
		return tx.Raw("SELECT @@last_gtid").Scan(&last).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.FormatUint(uint64(domain), 10) + "-"; len(last) < len(want) || last[:len(want)] != want {
		t.Fatalf("the write's GTID is %q; want one in domain %d", last, domain)
	}
}

// TestMariaDBOtherDomainNeverReadStale: writes in a GTID domain other than
// 0 (the main lane) are tracked in their own lane of the position. With
// the replica's SQL thread stopped, the written table is read fresh from
// the primary, an untouched table from the replica; after catch-up the
// written table from the replica again.
func TestMariaDBOtherDomainNeverReadStale(t *testing.T) {
	e := newMariaDomainEnv(t, 7)
	checkDomainWrites(t, e, 7)
	e.staleOnReplicas()
	got := e.readItem(e.db, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ after a write in domain 7: %+v", got)
	}
	e.mustPrimary(got, "read of a table written in domain 7, replica stopped")
	e.mustReplica(e.readOther(e.db), "read of an untouched table")
	e.resumeAll()
	got = e.readItem(e.db, 1)
	if got.Name != "new" {
		t.Fatalf("after catch-up: %+v", got)
	}
	e.mustReplica(got, "read after catch-up")
}

// TestMariaDBOtherDomainSession: read-your-writes through a session whose
// write is in domain 7; the session token carries the domain's lane.
func TestMariaDBOtherDomainSession(t *testing.T) {
	e := newMariaDomainEnv(t, 7, withConfig(func(c *plugin.Config) { c.Consistency = plugin.Session }))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	mine := plugin.WithSession(context.Background())
	if err := setName(e.db.WithContext(mine), 1); err != nil {
		t.Fatal(err)
	}
	// The session travels as a token (a cookie) to the next request.
	tok := plugin.SessionFrom(mine).Token()
	back, err := plugin.ParseToken(tok)
	if err != nil {
		t.Fatalf("ParseToken(%q): %v", tok, err)
	}
	next := plugin.ContextWithSession(context.Background(), back)
	if got := e.readItem(e.db.WithContext(next), 1); got.Name != "new" {
		t.Fatalf("STALE READ of the session's own write in domain 7 (token %q): %+v", tok, got)
	}
	e.mustReplica(e.readItem(e.db.WithContext(plugin.WithSession(context.Background())), 1), "another session")
}

// TestMariaDBOtherDomainCausalWait: MASTER_GTID_WAIT is given the GTID of
// every lane (domains 0 and 7) and returns once the replica has applied
// them.
func TestMariaDBOtherDomainCausalWait(t *testing.T) {
	checkWaitedRead(t, newMariaDomainEnv(t, 7, withConfig(withMaxWait)))
}

// TestMariaDBDirectWritesFloor: with DirectWrites, a write made outside the
// application (another connection, GTID domain 7) is read fresh once the
// poller has seen it, because MariaDB has no decoding tracker and every
// read waits for the primary's whole position at the last poll, in every
// domain.
func TestMariaDBDirectWritesFloor(t *testing.T) {
	e := newMariaEnv(t, withConfig(func(c *plugin.Config) { c.DirectWrites = true }))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.mustReplica(e.readItem(e.db, 1), "read with nothing written since the last poll")
	e.pauseAll()
	other, _ := domainCluster{mariaCluster{testcluster.MariaDBFor(t)}, 7}.primary(e.dbName).(*mysql.Dialector)
	direct, err := gorm.Open(other, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(direct)
	if err := direct.Exec("UPDATE items SET name = 'new' WHERE id = 1").Error; err != nil {
		t.Fatal(err)
	}
	// Wait for a poll to see the write: the replica then lags the primary.
	reg := prometheus.NewRegistry()
	if err := reg.Register(freshreadprom.Plugin(e.plug)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if lag, ok := gauge(t, reg, "freshread_replica_replay_lag_bytes"); ok && lag > 0 {
			// The same poll sets the floor a moment later.
			time.Sleep(50 * time.Millisecond)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no poll saw the direct write within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := e.readItem(e.db, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ of a direct write in domain 7 with DirectWrites: %+v", got)
	}
	e.mustPrimary(got, "read after a direct write, replica stopped")
	e.resumeAll()
	e.mustReplica(e.readItem(e.db, 1), "read after catch-up")
}
