package plugin

import (
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// Target is where a statement was sent.
type Target int

const (
	// Primary: the statement ran on the primary.
	Primary Target = iota
	// ReplicaTarget: the statement ran on a replica (Decision.Replica).
	ReplicaTarget
)

func (t Target) String() string {
	if t == ReplicaTarget {
		return "replica"
	}
	return "primary"
}

// Reason says why a statement went where it went.
type Reason string

// Reasons of a Decision.
const (
	ReasonFresh          Reason = "fresh"           // a replica had replayed every required position
	ReasonLagging        Reason = "lagging"         // no usable replica had replayed the required position
	ReasonNoReplica      Reason = "no-replica"      // no replica configured or none is up
	ReasonStoreError     Reason = "store-error"     // the store failed, timed out, is suspect or its breaker is open
	ReasonTransaction    Reason = "in-transaction"  // inside a transaction: always the primary
	ReasonLocking        Reason = "locking"         // FOR UPDATE / FOR SHARE
	ReasonHint           Reason = "hint"            // dbresolver.Write or dbresolver.Read
	ReasonConsistency    Reason = "consistency"     // Strong, or Eventual (any replica)
	ReasonWrite          Reason = "write"           // the statement writes
	ReasonUnknownSQL     Reason = "unknown-sql"     // raw SQL that could not be shown to be a plain read
	ReasonReplicaFailed  Reason = "replica-failed"  // the replica failed; retried on the primary
	ReasonReplicaStalled Reason = "replica-stalled" // the replica answered neither the read nor a ping within Config.StallTimeout; run again elsewhere
	ReasonReplicaRemoved Reason = "replica-removed" // the replica chosen was removed (SetReplicas, discovery) before the read reached it; run again elsewhere
	ReasonSticky         Reason = "sticky"          // the session wrote within Config.StickyWindow
	ReasonPinned         Reason = "pinned"          // db.Connection: the statement stays on its connection
)

// Decision describes one routing decision, for Config.OnDecision.
type Decision struct {
	// Target is where the statement was sent: the primary or a replica.
	Target  Target
	Replica string // replica name when Target is ReplicaTarget
	// Reason says why (see the Reason constants).
	Reason Reason
	// Tables the read touches; nil when unknown (the database-wide
	// position applied).
	Tables []string
	// Required is the position the replica had to have replayed: the
	// merge of the write positions of Tables and of the caller's session.
	Required lsnstore.Position
	// ReplicaPosition is the chosen replica's replay position or, when
	// none was fresh enough, that of the least lagging usable replica.
	ReplicaPosition lsnstore.Position
	// Keys are the keyed positions (positions by key, the default) the read
	// looked up instead of its table's position, as "orders id=7" (the
	// rows whose id is 7), "orders (unkeyed writes)" (the table's writes
	// that proved no key) and "orders (writes not keyed by user_id)";
	// nil when none.
	Keys []string
	// Waited is how long the read waited for a replica to catch up
	// (Config.MaxWait); zero when it did not wait.
	Waited time.Duration
	// StoreRoundTrips is the number of store round trips the read made to
	// look up write positions (0 or 1; a batched lookup counts as one).
	StoreRoundTrips int
}
