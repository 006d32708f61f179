package plugin

import (
	"database/sql"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// replica is one configured replica and what the poller knows of it.
type replica struct {
	name  string
	db    *sql.DB
	pool  *replicaPool
	state atomic.Pointer[replicaState]
	// polling: a poll's read of its replay position is out
	// (poll_replicas.go).
	polling atomic.Bool
	// replicating: replicatingUnknown, replicatingNo or replicatingYes,
	// from the engine's replication status (checkReplication).
	replicating atomic.Int32
	// privilegeWarning: the replica's status cannot be read for lack of a
	// privilege, said once (privileges.go).
	privilegeWarning sync.Once
	// replayWarning: its replay position is refused to the role, said
	// once (privileges.go).
	replayWarning sync.Once
	// stall: the round trips of its reads' first answers, and its ping
	// (stall.go).
	stall replicaStall
	// health is what the log said last of its polls (healthUnknown,
	// healthUp, healthDown: replica_health.go); secrets are what its
	// errors must not show in the log (its DSN and password).
	health  atomic.Int32
	secrets []string
	// failed is when a read on it last failed here (Unix nanoseconds; 0:
	// never): a follower keeps it down for a while whatever the shared
	// poll says (shared_poll.go).
	failed atomic.Int64
	// target is what the replica was opened on (replica_set.go): a
	// SetReplicas naming it again with the same target keeps it open.
	target replicaTarget
	// retired: removed from the replica set (replica_set.go); reads that
	// chose it before then run elsewhere unless already in flight, and
	// inFlight counts those (enter, leave) so that its pool is closed
	// only once they have their connections.
	retired  atomic.Bool
	inFlight atomic.Int64
}

// failedAt is when a read on r last failed here (the zero time: never).
func (r *replica) failedAt() time.Time {
	if n := r.failed.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// enter reports whether a read may use r now, and if so counts it in
// flight until leave: false once r is retired. The read's connection is
// held by then, and closing the pool does not break it.
func (r *replica) enter() bool {
	r.inFlight.Add(1)
	if r.retired.Load() {
		r.inFlight.Add(-1)
		return false
	}
	return true
}

func (r *replica) leave() { r.inFlight.Add(-1) }

// replicaState is one poll's result. A cached position is only ever older
// than the truth, so using it is conservative.
type replicaState struct {
	// pos is the replay position (raised to the primary's insert position
	// when the replica is provably caught up on an idle primary).
	pos lsnstore.Position
	// up: the last poll answered.
	up bool
	// withinLag: the replica has replayed what the primary had written
	// MaxLag ago, so write positions that expired from the store (whose TTL
	// is longer than MaxLag) are behind it too.
	withinLag bool
	// polledAt is when the poll answered.
	polledAt time.Time
}

// usable reports whether reads may go to the replica at all.
func (s *replicaState) usable(now time.Time, maxLag time.Duration) bool {
	return s != nil && s.up && s.withinLag && now.Sub(s.polledAt) < maxLag
}
