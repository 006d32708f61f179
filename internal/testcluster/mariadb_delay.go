package testcluster

import (
	"context"
	"fmt"
	"math"
	"time"
)

// SetApplyDelay delays the replica's apply of each transaction by d with
// MariaDB's only built-in delay, CHANGE MASTER TO MASTER_DELAY = n (run
// between STOP SLAVE and START SLAVE). MASTER_DELAY counts whole seconds,
// so d must be a whole number of seconds (0 removes the delay); any other
// d is an error and leaves the replica untouched.
//
// MariaDB compares the event's timestamp, in whole seconds, with the
// replica's clock, also in seconds: a transaction committed late in a
// second, or queued behind a delayed one, can be applied up to about a
// second sooner than d after its commit. A caller that needs a
// transaction to stay invisible for a while should commit it early in a
// second.
func (m *MariaDB) SetApplyDelay(ctx context.Context, d time.Duration) error {
	if d < 0 || d%time.Second != 0 {
		return fmt.Errorf("testcluster: MariaDB apply delay %v: MASTER_DELAY takes a whole, non-negative number of seconds (0s, 1s, 2s, …)", d)
	}
	n := int64(d / time.Second)
	if n > math.MaxInt32 {
		return fmt.Errorf("testcluster: MariaDB apply delay %v: MASTER_DELAY is at most %d seconds", d, math.MaxInt32)
	}
	return execMySQL(ctx, m.ReplicaDSN(""),
		"STOP SLAVE",
		fmt.Sprintf("CHANGE MASTER TO MASTER_DELAY = %d", n),
		"START SLAVE")
}
