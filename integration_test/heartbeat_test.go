package integration_test

import (
	"testing"

	"github.com/freshread/freshread/plugin"
)

func heartbeat(c *plugin.Config) { c.Positions = plugin.Heartbeat }

// TestHeartbeatPositions: with a heartbeat counter instead of LSNs or
// GTIDs, the write paths still never read stale data, on PostgreSQL and on
// MariaDB.
func TestHeartbeatPositions(t *testing.T) {
	paths := map[string]bool{"Update": true, "Transaction": true, "Exec": true, "SkipDefaultTransaction": true, "Create": true}
	for name, newE := range map[string]func(*testing.T, ...envOpt) *env{"postgres": newEnv, "mariadb": newMariaEnv} {
		for i, wp := range writePaths {
			if !paths[wp.name] {
				continue
			}
			t.Run(name+"/"+wp.name, func(t *testing.T) {
				e := newE(t, withConfig(heartbeat))
				runWritePath(t, e, wp, uint(i+1))
				var n int64
				if err := e.db.Raw("SELECT n FROM freshread_heartbeat WHERE id = 1").Scan(&n).Error; err != nil || n == 0 {
					t.Fatalf("heartbeat counter %d (err %v): the positions did not come from it", n, err)
				}
			})
		}
	}
}
