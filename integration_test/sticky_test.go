package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/freshread/freshread/plugin"
)

// TestStickyWindow: with StickyWindow, every read of a session that wrote
// goes to the primary for the window (even of untouched tables, even when
// the replicas have caught up), then back to the replicas.
func TestStickyWindow(t *testing.T) {
	e := newEnv(t, withConfig(func(c *plugin.Config) { c.StickyWindow = 700 * time.Millisecond }))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	ctx := plugin.WithSession(context.Background())
	db := e.db.WithContext(ctx)
	if err := setName(db, 1); err != nil {
		t.Fatal(err)
	}
	wrote := time.Now()
	e.resumeAll()
	got := e.readOther(db)
	if time.Since(wrote) < 600*time.Millisecond {
		e.mustPrimary(got, "untouched table inside the sticky window")
	}
	time.Sleep(time.Until(wrote.Add(800 * time.Millisecond)))
	got = e.readItem(db, 1)
	if got.Name != "new" {
		t.Fatalf("after the window: %+v", got)
	}
	e.mustReplica(got, "after the window")
	// The window travels in the token.
	s, err := plugin.ParseToken(plugin.SessionFrom(ctx).Token())
	if err != nil || s.Empty() {
		t.Fatalf("token: %v %v", s, err)
	}
}

// TestStickyWindowOverEventual: the classic setup (Eventual reads, a
// window after each write): the writing session reads from the primary,
// fresh, while another session reads the replica.
func TestStickyWindowOverEventual(t *testing.T) {
	e := newEnv(t, withConfig(func(c *plugin.Config) {
		c.StickyWindow = time.Minute
		c.Consistency = plugin.Eventual
	}))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	writer := e.db.WithContext(plugin.WithSession(context.Background()))
	if err := setName(writer, 1); err != nil {
		t.Fatal(err)
	}
	got := e.readOther(writer)
	e.mustPrimary(got, "writer's read inside the window")
	if got := e.readItem(writer, 1); got.Name != "new" {
		t.Fatalf("STALE READ inside the window: %+v", got)
	}
	e.mustReplica(e.readOther(e.db.WithContext(plugin.WithSession(context.Background()))), "another session")
}
