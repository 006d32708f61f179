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
}

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
