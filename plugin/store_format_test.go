package plugin

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
)

// formatStore is a memory store whose CheckFormat answers err.
type formatStore struct {
	*lsnstore.Memory
	err    error
	checks int
}

func (s *formatStore) CheckFormat(context.Context) error { s.checks++; return s.err }

// TestStoreFormatRefusedAtUse: a store that holds a format this process
// cannot run beside fails db.Use, before any database is contacted (the
// primary's DSN reaches nothing), with an error wrapping
// lsnstore.ErrStoreFormat that names both releases and the remedy.
func TestStoreFormatRefusedAtUse(t *testing.T) {
	fe := &lsnstore.FormatError{Key: "freshread:{shop}-format", Found: 2, FoundOldest: 2, FoundRelease: "9.0.0",
		Format: lsnstore.FormatVersion, Oldest: lsnstore.OldestCompatibleFormat, Release: "0.2.0"}
	store := &formatStore{Memory: lsnstore.NewMemory(), err: fe}
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: "host=127.0.0.1 port=1 user=app dbname=shop connect_timeout=1"}), &gorm.Config{DisableAutomaticPing: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Use(New(Config{Store: store}))
	if !errors.Is(err, lsnstore.ErrStoreFormat) {
		t.Fatalf("db.Use beside an incompatible format = %v, want lsnstore.ErrStoreFormat", err)
	}
	for _, s := range []string{"freshread 9.0.0 (format 2)", "freshread 0.2.0 (format 1)", "run 9.0.0 or a later release here too"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("db.Use's error does not say %q: %v", s, err)
		}
	}
	if store.checks != 1 {
		t.Fatalf("CheckFormat called %d times, want 1", store.checks)
	}
}

// TestStoreFormatUnreachableNotRefused: a store that cannot be asked at
// db.Use is no refusal (its reader checks at every verification until
// it answers): a warning, no error.
func TestStoreFormatUnreachableNotRefused(t *testing.T) {
	var logs bytes.Buffer
	store := &formatStore{Memory: lsnstore.NewMemory(), err: errors.New("lsnstore: redis format check: dial tcp: connection refused")}
	p := New(Config{Store: store, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := p.checkStoreFormat(); err != nil {
		t.Fatalf("checkStoreFormat with an unreachable store = %v, want nil", err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "connection refused") {
		t.Fatalf("no warning naming the failure:\n%s", logs.String())
	}
	store.err = nil
	logs.Reset()
	if err := p.checkStoreFormat(); err != nil || logs.Len() != 0 {
		t.Fatalf("checkStoreFormat with a compatible store = %v, logs %q", err, logs.String())
	}
}
