package sharding

import (
	"testing"

	"github.com/freshread/freshread/internal/lib/sentineltest"
)

// Every sentinel of the package has its Is helper, which sees it through
// wrapping and rejects the others.
func TestIsHelpers(t *testing.T) {
	for _, problem := range sentineltest.Problems(map[error]func(error) bool{ErrConfig: IsConfig, ErrNoShardKey: IsNoShardKey, ErrCrossShard: IsCrossShard, ErrShardKeyChange: IsShardKeyChange, ErrStaleLookup: IsStaleLookup, ErrUnknownShard: IsUnknownShard, ErrUnsupportedStatement: IsUnsupportedStatement, ErrNoFreshness: IsNoFreshness, ErrMapConflict: IsMapConflict, ErrMapStale: IsMapStale, ErrBucketMoved: IsBucketMoved, ErrLeaseLost: IsLeaseLost, ErrNoWorker: IsNoWorker, ErrClockBackwards: IsClockBackwards, ErrIDInUse: IsIDInUse, ErrCommitPending: IsCommitPending, ErrNoAtomicCommit: IsNoAtomicCommit}) {
		t.Error(problem)
	}
}
