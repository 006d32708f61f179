package soak

import (
	"context"
	"fmt"
	"sort"
	"time"

	"gorm.io/gorm"
)

// Direct writes: with Config.Tracker, a program outside the plugins (a
// plain *gorm.DB on the primary) bumps the versions of soak_direct's rows,
// and a reader in the first plugin instance reads them. The tracker
// publishes them; the promise for writes made outside the application is
// weaker than for the plugins' own (docs/design/tracker.md): a read may miss one
// until the tracker has decoded it, and for at most directBound after it
// returned when the tracker is dead. The checker counts both apart.

// directKeys is the number of soak_direct rows.
const directKeys = 8

func createDirectTable(db *gorm.DB) error {
	if err := db.Exec("CREATE TABLE soak_direct (id int PRIMARY KEY, version bigint NOT NULL)").Error; err != nil {
		return err
	}
	for i := 0; i < directKeys; i++ {
		if err := db.Exec("INSERT INTO soak_direct (id, version) VALUES (?, 0)", i).Error; err != nil {
			return err
		}
	}
	return nil
}

// directWriter bumps soak_direct's rows in turn through plain, a
// connection without the plugin.
func directWriter(ctx context.Context, plain *gorm.DB, rec *recorder, stop <-chan struct{}) {
	next := func(k int) int { return (k + 1) % directKeys }
	bump(ctx, plain, stop, "soak_direct", 0, next, 5*time.Millisecond, func(w Write, err error) {
		if err != nil {
			return // the primary restarting: not the plugins' error
		}
		rec.mu.Lock()
		rec.directWrites = append(rec.directWrites, w)
		rec.mu.Unlock()
	})
}

// checkDirect returns the reads of soak_direct that missed a direct write
// which returned before they began (late), the longest any of them began
// after the oldest write it missed had returned (lateBy), and the reads
// that missed one which returned more than bound before they began
// (stale).
func checkDirect(writes []Write, reads []Read, bound time.Duration) (late []Violation, lateBy time.Duration, stale []Violation) {
	late = Check(writes, nil, reads)
	byKey := map[int][]Write{}
	for _, w := range writes {
		byKey[w.Key] = append(byKey[w.Key], w)
	}
	for _, ws := range byKey {
		sort.Slice(ws, func(i, j int) bool { return ws[i].Returned.Before(ws[j].Returned) })
	}
	for _, v := range late {
		// The direct writer's versions of a key grow with time: the first
		// write above the version read is the oldest one missed.
		ws := byKey[v.Read.Key]
		i := sort.Search(len(ws), func(i int) bool { return ws[i].Version > v.Read.Version })
		if i < len(ws) {
			lateBy = max(lateBy, v.Read.Started.Sub(ws[i].Returned))
		}
	}
	shifted := make([]Write, len(writes))
	for i, w := range writes {
		w.Returned = w.Returned.Add(bound)
		shifted[i] = w
	}
	stale = Check(shifted, nil, reads)
	for i := range stale {
		stale[i].Write.Returned = stale[i].Write.Returned.Add(-bound)
		stale[i].Kind = fmt.Sprintf("direct, beyond %v", bound)
	}
	return late, lateBy, stale
}
