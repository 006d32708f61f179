package plugin

import "github.com/freshread/freshread/lsnstore"

// The floor is the one position every Table read waits for besides its
// tables': the merge of the direct-write floor (Config.DirectWrites, while
// the tracker's decoding is missing or behind: poller.go) and the loss
// floor (after a store discontinuity: continuity.go). The poller owns
// both parts and publishes their merge; reads load it lock-free
// (route.go, tablesPosition).

// storeFloor publishes the merge of the floor's parts (nil when none).
func (p *Plugin) storeFloor() {
	var f *lsnstore.Position
	for _, part := range []*lsnstore.Position{p.directPart, p.lossPart} {
		if part == nil {
			continue
		}
		if f == nil {
			v := *part
			f = &v
		} else {
			v := f.Merge(*part)
			f = &v
		}
	}
	p.floor.Store(f)
}
