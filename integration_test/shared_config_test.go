package integration_test

import (
	"log/slog"
	"strings"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestSecondOpenSameConfigIsReported: GORM keeps a *gorm.DB's callbacks in
// its *gorm.Config, and a second gorm.Open with the same *gorm.Config
// replaces them: the first *gorm.DB loses the plugin (its writes no
// longer published). The second gorm.Open must fail naming the remedy,
// and the plugin must also say so at ERROR.
func TestSecondOpenSameConfigIsReported(t *testing.T) {
	e := newEnv(t)
	var logs syncBuffer
	cfg := &gorm.Config{Logger: logger.Discard}
	db, err := gorm.Open(e.c.primary(e.dbName), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(db)
	p := plugin.New(plugin.Config{
		Replicas: []plugin.Replica{{Name: "r0", Dialector: e.c.replica(0, e.dbName)}},
		Store:    lsnstore.NewMemory(),
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if strings.Contains(logs.String(), "callbacks are gone") {
		t.Fatalf("reported before the second gorm.Open:\n%s", logs.String())
	}
	// GORM initializes the Config's plugins on the new *gorm.DB: the
	// plugin refuses, naming the cause.
	second, err := gorm.Open(e.c.primary(e.dbName), cfg)
	if err == nil || !strings.Contains(err.Error(), "its own &gorm.Config{}") {
		t.Fatalf("second gorm.Open with the same *gorm.Config: %v, want the plugin's error naming the remedy", err)
	}
	if second != nil {
		defer closeDB(second)
	}
	// The log says it too, for a program that goes on.
	if !strings.Contains(logs.String(), "callbacks are gone") {
		t.Fatalf("no ERROR logged at the second gorm.Open; log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "its own &gorm.Config{}") {
		t.Fatalf("the report does not say what to do:\n%s", logs.String())
	}
}
