package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// recordedPool records the setters apply calls.
type recordedPool struct{ calls []string }

func (r *recordedPool) SetMaxOpenConns(n int) { r.calls = append(r.calls, "open="+strconv.Itoa(n)) }
func (r *recordedPool) SetMaxIdleConns(n int) { r.calls = append(r.calls, "idle="+strconv.Itoa(n)) }
func (r *recordedPool) SetConnMaxLifetime(d time.Duration) {
	r.calls = append(r.calls, "life="+d.String())
}
func (r *recordedPool) SetConnMaxIdleTime(d time.Duration) {
	r.calls = append(r.calls, "idletime="+d.String())
}

func TestReplicaPoolOverridesFieldByField(t *testing.T) {
	def := Pool{MaxOpenConns: 10, MaxIdleConns: 5, ConnMaxLifetime: time.Hour}
	got := Pool{MaxOpenConns: 4, ConnMaxIdleTime: time.Minute}.over(def)
	want := Pool{MaxOpenConns: 4, MaxIdleConns: 5, ConnMaxLifetime: time.Hour, ConnMaxIdleTime: time.Minute}
	if got != want {
		t.Fatalf("over = %+v, want %+v", got, want)
	}
	// A negative field overrides the default with "none".
	if got := (Pool{MaxOpenConns: -1}).over(def); got.MaxOpenConns != -1 {
		t.Fatalf("MaxOpenConns -1 over 10 = %d", got.MaxOpenConns)
	}
}

func TestReplicaPoolApply(t *testing.T) {
	var r recordedPool
	Pool{}.apply(&r)
	if len(r.calls) != 0 {
		t.Fatalf("a zero Pool set %v: it must leave database/sql's defaults", r.calls)
	}
	r = recordedPool{}
	Pool{MaxOpenConns: 8, MaxIdleConns: 3, ConnMaxLifetime: time.Minute, ConnMaxIdleTime: time.Second}.apply(&r)
	want := []string{"open=8", "idle=3", "life=1m0s", "idletime=1s"}
	if !reflect.DeepEqual(r.calls, want) {
		t.Fatalf("apply: %v, want %v", r.calls, want)
	}
	r = recordedPool{}
	Pool{MaxOpenConns: -1, MaxIdleConns: -1, ConnMaxLifetime: -1, ConnMaxIdleTime: -1}.apply(&r)
	want = []string{"open=0", "idle=-1", "life=0s", "idletime=0s"}
	if !reflect.DeepEqual(r.calls, want) {
		t.Fatalf("apply negatives: %v, want %v", r.calls, want)
	}
}

// TestReplicaPoolOnSQLDB: the settings reach a real *sql.DB.
func TestReplicaPoolOnSQLDB(t *testing.T) {
	db := sql.OpenDB(noConnector{})
	defer db.Close()
	Pool{MaxOpenConns: 7}.apply(db)
	if got := db.Stats().MaxOpenConnections; got != 7 {
		t.Fatalf("MaxOpenConnections = %d, want 7", got)
	}
}

// noConnector is a connector never asked for a connection.
type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) { return nil, errors.New("no") }
func (noConnector) Driver() driver.Driver                        { return nil }
