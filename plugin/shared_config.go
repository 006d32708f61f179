package plugin

import "fmt"

// GORM keeps a *gorm.DB's callbacks, connection pool, dialector and
// plugins in its *gorm.Config. gorm.Open with a *gorm.Config that already
// opened a DB replaces that Config's callbacks and pool, so the first
// *gorm.DB loses the plugin's callbacks (its reads go to the primary
// unchecked, its writes are no longer published: other processes could
// read them stale) and sends its statements to the second DB's database;
// then gorm.Open initializes the Config's plugins on the new DB, which
// calls Initialize a second time with the same Config. That call is the
// moment it happens: sharedConfig says so in the log, at ERROR, for a
// program that goes on after gorm.Open's error, and returns the error.
// (Checking the callbacks from the poller instead would race with GORM's
// callback registration, which is not safe for concurrent use.)

// sharedConfig reports a second gorm.Open with the plugin's *gorm.Config.
func (p *Plugin) sharedConfig() error {
	p.cfg.Logger.Error("freshread: the plugin's callbacks are gone from the *gorm.DB it was installed on: gorm.Open was called again with the same *gorm.Config, which replaces the callbacks and the connection pool of every *gorm.DB opened with it; that *gorm.DB's reads are no longer checked and its writes no longer published (other processes may read them stale): give each gorm.Open its own &gorm.Config{} (troubleshooting guide)")
	return fmt.Errorf("%w: gorm.Open was called again with the *gorm.Config this plugin was installed with; GORM replaced the callbacks and the connection pool of the first *gorm.DB, which lost the plugin: give each gorm.Open its own &gorm.Config{}", ErrConfig)
}
