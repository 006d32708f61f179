package soak

import (
	"slices"
	"sort"
	"time"
)

// Write is one committed write: key now holds Version, and the call that
// wrote it began at Called and returned at Returned. Versions of a key
// only grow.
type Write struct {
	Key      int
	Version  int64
	Called   time.Time `json:",omitzero"`
	Returned time.Time
}

// Read is one read of Key that saw Version; it began at Started. Session
// is the session it ran in (0: none) and Server the port that answered.
type Read struct {
	Key     int
	Version int64
	Started time.Time
	Session int
	Server  int
	Took    time.Duration // until the read returned
	// Table marks a read of the whole table (not pinned to a key): one
	// Read per row it returned, all with the same times.
	Table bool `json:",omitempty"`
}

// SessionWrite is a write made in a session: a read of the session that
// began after Returned must see at least Version.
type SessionWrite struct {
	Session int
	Write
}

// Violation is a read older than a write it had to see.
type Violation struct {
	Read Read
	// Want is the version the read had to see at least; Write is the
	// write that set it.
	Want  int64
	Write Write
	// Kind is "table" or "session".
	Kind string
}

// Check returns every read that saw an older version of its key than the
// newest write of that key that returned before the read began (Table),
// and every session read older than the session's own newest write that
// returned before the read began (Session). It relies on nothing but the
// records: a write that returned before a read started is in the read's
// past, whatever the system did in between.
func Check(writes []Write, sessionWrites []SessionWrite, reads []Read) []Violation {
	byKey := map[int][]Write{}
	for _, w := range writes {
		byKey[w.Key] = append(byKey[w.Key], w)
	}
	for _, sw := range sessionWrites {
		byKey[sw.Key] = append(byKey[sw.Key], sw.Write)
	}
	for _, ws := range byKey {
		sort.Slice(ws, func(i, j int) bool { return ws[i].Returned.Before(ws[j].Returned) })
		// Prefix maximum of versions: the newest version any write
		// returned by then.
		for i := 1; i < len(ws); i++ {
			if ws[i].Version < ws[i-1].Version {
				ws[i].Version = ws[i-1].Version
			}
		}
	}
	bySession := map[int][]Write{}
	for _, sw := range sessionWrites {
		bySession[sw.Session] = append(bySession[sw.Session], sw.Write)
	}
	for _, ws := range bySession {
		sort.Slice(ws, func(i, j int) bool { return ws[i].Returned.Before(ws[j].Returned) })
	}
	var out []Violation
	for _, r := range reads {
		if w, ok := latestBefore(byKey[r.Key], r.Started); ok && r.Version < w.Version {
			out = append(out, Violation{Read: r, Want: w.Version, Write: w, Kind: "table"})
			continue
		}
		if r.Session == 0 {
			continue
		}
		ws := bySession[r.Session]
		for i := len(ws) - 1; i >= 0; i-- {
			if ws[i].Returned.Before(r.Started) && ws[i].Key == r.Key {
				if r.Version < ws[i].Version {
					out = append(out, Violation{Read: r, Want: ws[i].Version, Write: ws[i], Kind: "session"})
				}
				break
			}
		}
	}
	return out
}

// latestBefore returns the last write (by Returned, with the running
// maximum version) that returned strictly before t.
func latestBefore(ws []Write, t time.Time) (Write, bool) {
	i, _ := slices.BinarySearchFunc(ws, t, func(w Write, t time.Time) int {
		if w.Returned.Before(t) {
			return -1
		}
		return 1
	})
	if i == 0 {
		return Write{}, false
	}
	return ws[i-1], true
}
