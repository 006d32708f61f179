package plugin

import (
	"time"

	"github.com/freshread/freshread/callbacks"
)

// GORM keeps a *gorm.DB's callbacks, connection pool, dialector and
// plugins in its *gorm.Config, and gorm.Open replaces the callbacks and
// the pool of the Config it is given. A second gorm.Open with the same
// *gorm.Config therefore takes the plugin's callbacks away from the first
// *gorm.DB (and sends its statements to the second's database): its reads
// go to the primary unchecked and its writes are no longer published, so
// other processes could read them stale. The poller looks for the
// plugin's callbacks while it runs (at most once a second, and before
// each rest: the usual case is two gorm.Open calls at start-up, while the
// plugin is awake) and says so loudly once.

// callbacksCheckEvery is how often the poller checks the callbacks.
const callbacksCheckEvery = time.Second

// checkCallbacks logs an ERROR, once, when the plugin's callbacks are no
// longer those of its *gorm.DB.
func (p *Plugin) checkCallbacks(now time.Time) {
	if p.gormDB == nil || p.callbacksGone.Load() || now.UnixNano()-p.callbacksCheckedAt < int64(callbacksCheckEvery) {
		return
	}
	p.callbacksCheckedAt = now.UnixNano()
	if p.gormDB.Callback().Raw().Get(callbacks.Primary) != nil {
		return
	}
	p.callbacksGone.Store(true)
	p.cfg.Logger.Error("freshread: the plugin's callbacks are gone from the *gorm.DB it was installed on: gorm.Open was called again with the same *gorm.Config, which replaces the callbacks and the connection pool of every *gorm.DB opened with it; this *gorm.DB's reads are no longer checked and its writes no longer published (other processes may read them stale): give each gorm.Open its own &gorm.Config{} (troubleshooting guide)")
}
