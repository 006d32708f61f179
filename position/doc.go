// Package position holds the replication positions of MariaDB and MySQL,
// the engine-specific counterparts of the PostgreSQL LSN in lsnstore: what
// a write position looks like after COMMIT, what a replica reports as
// applied, and how the two are compared.
//
// # MariaDB: GTID lists
//
// A MariaDB GTID is domain-server-seq: a replication domain, the server ID
// of the server that logged the transaction, and a sequence number. A
// position (@@gtid_binlog_pos and @@last_gtid on the primary,
// @@gtid_slave_pos on a replica) is a list of such GTIDs, the last one per
// domain: "0-1-100,1-2-50". MariaDBGTIDList parses and prints it.
//
// Positions are compared per domain, by sequence number: a replica has
// applied a write when, in every domain of the write's list, the replica's
// sequence number is at least as high (MariaDBGTIDList.HasApplied). This
// relies on gtid_strict_mode, under which sequence numbers only grow within
// a domain whichever server logs them, so server IDs are not compared.
// MariaDBGTIDList.Merge is the per-domain maximum. The plugin keeps a list
// as an lsnstore.Position with a lane per domain, which the store raises
// lane by lane: the same per-domain maximum.
//
// # MySQL: GTID sets
//
// A MySQL GTID is uuid:number, or uuid:tag:number from MySQL 8.3 on, the
// UUID being the originating server's server_uuid. A position
// (@@GLOBAL.gtid_executed, on the primary and on a replica alike) is the set
// of all transactions executed, written as ranges per source, one source a
// line:
//
//	3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100:200-300,
//	8a94f357-aab4-11df-86ab-c80aa9429563:1-5:batch:1-3
//
// Tagged GTIDs (batch above) and untagged ones of one UUID are numbered
// independently. MySQLGTIDSet parses and prints such sets.
//
// Sets are compared by inclusion: a replica has applied a write when the
// write's set is a subset of the replica's (MySQLGTIDSet.Contains, which is
// GTID_SUBSET). Sets with gaps are not totally ordered, so a store must not
// compare their strings; MySQLGTIDSet.Union is their merge. The plugin
// reduces a set to a number per source (Lasts on the primary, the
// contiguous Prefixes on a replica), kept as an lsnstore.Position with a
// lane per source: a replica position that covers a write position then
// contains the primary's whole set at the write.
//
// # Text and errors
//
// Both types are immutable values whose zero value is the empty position.
// Their String methods give a canonical form, the same for equal positions,
// which the store keeps and the servers accept back (MASTER_GTID_WAIT,
// WAIT_FOR_EXECUTED_GTID_SET). Every parse error wraps ErrBadPosition and
// says what is wrong, quoting at most 80 bytes of the input.
package position
