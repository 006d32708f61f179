package plugin

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestFailedStmtAnswersItsError: every use of a failed statement returns
// the error it was made with, as a *sql.Tx's StmtContext does.
func TestFailedStmtAnswersItsError(t *testing.T) {
	want := errors.New("current transaction is aborted")
	s := failedStmt(context.Background(), want)
	if _, err := s.Exec(1); !errors.Is(err, want) {
		t.Errorf("Exec: %v, want %v", err, want)
	}
	if _, err := s.Query(); !errors.Is(err, want) {
		t.Errorf("Query: %v, want %v", err, want)
	}
	var x int
	if err := s.QueryRow().Scan(&x); !errors.Is(err, want) {
		t.Errorf("QueryRow: %v, want %v", err, want)
	}
	other := failedStmt(context.Background(), errAnother)
	if _, err := other.Exec(); !errors.Is(err, errAnother) {
		t.Errorf("a second failed statement: %v, want %v", err, errAnother)
	}
}

var errAnother = errors.New("another failure")

// TestStmtSQLRemembersWhileAlive: a statement's SQL is found while the
// statement lives and forgotten once it is collected.
func TestStmtSQLRemembersWhileAlive(t *testing.T) {
	var r stmtSQL
	s := failedStmt(context.Background(), errAnother)
	r.remember(s, "SELECT 1")
	if q, ok := r.query(s); !ok || q != "SELECT 1" {
		t.Fatalf("query = %q, %v", q, ok)
	}
	other := failedStmt(context.Background(), errAnother)
	if _, ok := r.query(other); ok {
		t.Fatal("a statement never remembered has SQL")
	}
	runtime.KeepAlive(s)
	s = nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		n := 0
		r.m.Range(func(any, any) bool { n++; return true })
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements still remembered after they were collected", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
