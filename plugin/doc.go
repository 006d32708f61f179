// Package plugin is freshread's GORM plugin: it sends each read to a
// PostgreSQL replica that has replayed the last write to every table the
// read touches (and the caller's own writes), and otherwise to the primary.
//
//	db, _ := gorm.Open(postgres.Open(primaryDSN), &gorm.Config{})
//	err := db.Use(plugin.New(plugin.Config{
//		Replicas: []plugin.Replica{{Name: "r1", Dialector: postgres.Open(r1DSN)}},
//		Store:    lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "shop"}),
//	}))
//
// Writes are published after COMMIT returns: the plugin wraps the primary's
// pool so every transaction's Commit reads pg_current_wal_insert_lsn() and
// raises the written tables' positions in the store. A background poller
// reads each replica's pg_last_wal_replay_lsn(). Any doubt (store down,
// unknown tables, replica error) sends the read to the primary.
//
// With a remote store a read does not wait for the store before it starts
// (overlap.go, batch.go): it runs on a replica that covers the caller's
// session while the store is asked (concurrent reads share one MGET), and
// its rows are kept only if that replica, as known before the query, had
// replayed everything the store then requires; otherwise they are
// discarded and the read runs where the rule sends it
// (Config.SequentialLookup turns this off). Reads and writes pinned to key
// values use positions per key (keys.go, keys_raw.go, keys_table.go;
// Config.TablePositions turns this off), under the table's key signature
// (keys_signature.go), by the primary key of the table's model or, without
// one, of the catalog (keys_catalog.go).
//
// With github.com/freshread/freshread/freshreadotel imported, a statement
// whose context carries a recording OpenTelemetry span adds a RouteEvent
// (reads) or WriteEvent (writes) to it, with the decision's server, reason
// and tables (trace.go); without one nothing is recorded.
package plugin
