package lsnstore

import (
	"strconv"
	"time"
)

// Expirer is a Store whose positions expire. An expired position reads as
// "no recent write", which is only correct once every replica in use has
// replayed past it: a caller must stop using a replica that lags by more
// than KeyTTL.
type Expirer interface {
	KeyTTL() time.Duration
}

// KeyTTL is RedisOptions.TTL (after defaults).
func (r *Redis) KeyTTL() time.Duration {
	ms, _ := strconv.ParseInt(r.ttl, 10, 64)
	return time.Duration(ms) * time.Millisecond
}
