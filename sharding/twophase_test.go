package sharding

import "testing"

// A global ID names its coordinator shard and transaction ID whatever
// the shard names hold; IDs of others are not taken for the plugin's.
func TestGlobalIDRoundTrip(t *testing.T) {
	for _, name := range []string{"s0", "eu:west's", ""} {
		g := gid(name, 1<<40+7, "part:1")
		if len(g) > 200 && len(name) < 40 {
			t.Fatalf("gid %q longer than PostgreSQL's 200 bytes", g)
		}
		c, x, ok := parseGID(g)
		if !ok || c != name || x != 1<<40+7 {
			t.Fatalf("parseGID(%q) = %q, %d, %v", g, c, x, ok)
		}
	}
	for _, g := range []string{"other:73303a:1:00:00", "freshread:zz:1:00:00", "freshread:7330:x:00:00", "freshread:7330:1"} {
		if _, _, ok := parseGID(g); ok {
			t.Fatalf("parseGID(%q) accepted", g)
		}
	}
}
