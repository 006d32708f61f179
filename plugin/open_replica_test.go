package plugin

import (
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// TestReplicaOpenedWithoutVersionQuery: a MySQL dialector is opened for a
// replica without gorm's SELECT VERSION() (which failed db.Use when the
// replica was down), on a copy: the caller's dialector is left as it was.
// Other dialectors, and a MySQL one that already skips the query, are
// used as given.
func TestReplicaOpenedWithoutVersionQuery(t *testing.T) {
	given := mysql.Open("app:pw@tcp(127.0.0.1:1)/x").(*mysql.Dialector)
	got, ok := withoutVersionQuery(given).(*mysql.Dialector)
	if !ok || !got.Config.SkipInitializeWithVersion || got.Config.DSN != given.Config.DSN {
		t.Fatalf("MySQL replica dialector: %+v, want the same DSN, SkipInitializeWithVersion", got)
	}
	if given.Config.SkipInitializeWithVersion {
		t.Fatal("the caller's dialector was changed")
	}
	// Opened on a server that is down, it opens: the pool dials later.
	if _, err := gorm.Open(got, &gorm.Config{DisableAutomaticPing: true}); err != nil {
		t.Fatalf("open a MySQL replica that is down: %v", err)
	}
	skipping := mysql.New(mysql.Config{DSN: "app:pw@tcp(127.0.0.1:1)/x", SkipInitializeWithVersion: true})
	pg := postgres.Open("postgres://app@127.0.0.1:1/x")
	for _, d := range []gorm.Dialector{skipping, pg} {
		if withoutVersionQuery(d) != d {
			t.Fatalf("%T: replaced, want used as given", d)
		}
	}
}
