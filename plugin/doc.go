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
package plugin
