package position

import "strings"

// Last returns the highest transaction number of the untagged GTIDs of
// source uuid in s (0 when s has none). On a primary, after a commit
// returned, it is at or past that commit's number.
func (s MySQLGTIDSet) Last(uuid string) (uint64, error) {
	ivs, err := s.untagged(uuid)
	if err != nil || len(ivs) == 0 {
		return 0, err
	}
	return ivs[len(ivs)-1].last, nil
}

// Prefix returns the largest n such that uuid:1-n is contained in s (0 when
// transaction 1 is missing). A replica whose prefix is at least a write's
// number has applied that write, whatever the gaps after it: conservative
// when a multi-threaded replica applies out of order.
func (s MySQLGTIDSet) Prefix(uuid string) (uint64, error) {
	ivs, err := s.untagged(uuid)
	if err != nil || len(ivs) == 0 || ivs[0].first != 1 {
		return 0, err
	}
	return ivs[0].last, nil
}

func (s MySQLGTIDSet) untagged(uuid string) (intervals, error) {
	u, ok := parseUUID(strings.ToLower(strings.TrimSpace(uuid)))
	if !ok {
		return nil, &parseError{kind: "MySQL server UUID", input: uuid, problem: "not a UUID"}
	}
	for _, ts := range s.sets {
		if ts.key.uuid == u && ts.key.tag == "" {
			return ts.ivs, nil
		}
	}
	return nil, nil
}
