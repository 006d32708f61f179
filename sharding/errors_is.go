package sharding

import "errors"

// IsConfig reports whether err is, or wraps, ErrConfig; errors.Is works as
// well.
func IsConfig(err error) bool { return errors.Is(err, ErrConfig) }

// IsNoShardKey reports whether err is, or wraps, ErrNoShardKey; errors.Is works as
// well.
func IsNoShardKey(err error) bool { return errors.Is(err, ErrNoShardKey) }

// IsCrossShard reports whether err is, or wraps, ErrCrossShard; errors.Is works as
// well.
func IsCrossShard(err error) bool { return errors.Is(err, ErrCrossShard) }

// IsShardKeyChange reports whether err is, or wraps, ErrShardKeyChange; errors.Is works as
// well.
func IsShardKeyChange(err error) bool { return errors.Is(err, ErrShardKeyChange) }

// IsStaleLookup reports whether err is, or wraps, ErrStaleLookup; errors.Is works as
// well.
func IsStaleLookup(err error) bool { return errors.Is(err, ErrStaleLookup) }

// IsUnknownShard reports whether err is, or wraps, ErrUnknownShard; errors.Is works as
// well.
func IsUnknownShard(err error) bool { return errors.Is(err, ErrUnknownShard) }

// IsUnsupportedStatement reports whether err is, or wraps, ErrUnsupportedStatement; errors.Is works as
// well.
func IsUnsupportedStatement(err error) bool { return errors.Is(err, ErrUnsupportedStatement) }

// IsNoFreshness reports whether err is, or wraps, ErrNoFreshness; errors.Is works as
// well.
func IsNoFreshness(err error) bool { return errors.Is(err, ErrNoFreshness) }

// IsMapConflict reports whether err is, or wraps, ErrMapConflict; errors.Is works as
// well.
func IsMapConflict(err error) bool { return errors.Is(err, ErrMapConflict) }

// IsMapStale reports whether err is, or wraps, ErrMapStale; errors.Is works as
// well.
func IsMapStale(err error) bool { return errors.Is(err, ErrMapStale) }

// IsBucketMoved reports whether err is, or wraps, ErrBucketMoved; errors.Is works as
// well.
func IsBucketMoved(err error) bool { return errors.Is(err, ErrBucketMoved) }

// IsLeaseLost reports whether err is, or wraps, ErrLeaseLost; errors.Is works as
// well.
func IsLeaseLost(err error) bool { return errors.Is(err, ErrLeaseLost) }

// IsNoWorker reports whether err is, or wraps, ErrNoWorker; errors.Is works as
// well.
func IsNoWorker(err error) bool { return errors.Is(err, ErrNoWorker) }

// IsClockBackwards reports whether err is, or wraps, ErrClockBackwards; errors.Is works as
// well.
func IsClockBackwards(err error) bool { return errors.Is(err, ErrClockBackwards) }

// IsIDInUse reports whether err is, or wraps, ErrIDInUse; errors.Is works as
// well.
func IsIDInUse(err error) bool { return errors.Is(err, ErrIDInUse) }

// IsCommitPending reports whether err is, or wraps, ErrCommitPending;
// errors.Is works as well.
func IsCommitPending(err error) bool { return errors.Is(err, ErrCommitPending) }

// IsNoAtomicCommit reports whether err is, or wraps, ErrNoAtomicCommit;
// errors.Is works as well.
func IsNoAtomicCommit(err error) bool { return errors.Is(err, ErrNoAtomicCommit) }
