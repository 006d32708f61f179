package reshard_test

import (
	"context"
	"database/sql"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/freshread/freshread/reshard"
	"github.com/freshread/freshread/sharding"
)

// The example below is the code of docs/guide/sharding.md
// (internal/doccheck checks it). It needs servers, so it is compiled, not
// run.

// A move of buckets 512..767 from s0 to the new shard s4, with the copied
// rows' positions recorded in the shard's freshness store.
func Example_move() {
	ctx := context.Background()
	var s *sharding.Sharding       // the sharding plugin, configured as in every process
	var mapStore sharding.MapStore // the same map store
	var shards []reshard.Shard
	for _, name := range []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"} {
		primary, err := sql.Open("pgx", "postgres://mover@"+name+"/shop")
		if err != nil {
			panic(err)
		}
		shard := reshard.Shard{Name: name, DB: primary}
		if p, err := s.Freshness(name); err == nil {
			shard.RecordWrite = p.RecordWrite // the shard's store, as the services use it
		}
		shards = append(shards, shard)
	}
	cfg := reshard.Config{
		Shards: shards, // every shard: each gets the guard
		Tables: []reshard.Table{{Name: "orders", Key: "user_id"}, {Name: "order_items", Key: "user_id"}},
		Store:  mapStore,
	}
	var buckets []int
	for b := 512; b < 768; b++ {
		buckets = append(buckets, b)
	}
	m, err := reshard.New(cfg, reshard.Move{Buckets: buckets, From: "s0", To: "s4"})
	if err != nil {
		panic(err)
	}
	if _, err := m.Run(ctx); err != nil { // Prepare, Copy, CatchUp, Switch; run again after a crash: it resumes
		panic(err) // or m.Rollback(ctx): a stopped move keeps its replication slot on s0
	}
	if _, err := m.Cleanup(ctx); err != nil { // later: the moved rows deleted from s0, the slot dropped
		panic(err)
	}
}

// The shards of a move between MariaDB shards: each opened with
// go-sql-driver/mysql, with a DSN over TCP for the mover's binlog reader.
func Example_mariaDBShards() {
	var s *sharding.Sharding // the sharding plugin, configured as in every process
	var shards []reshard.Shard
	for _, name := range []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"} {
		dsn := "mover:secret@tcp(" + name + ":3306)/shop"
		primary, err := sql.Open("mysql", dsn)
		if err != nil {
			panic(err)
		}
		shard := reshard.Shard{Name: name, DB: primary, BinlogDSN: dsn}
		if p, err := s.Freshness(name); err == nil {
			shard.RecordWrite = p.RecordWrite
		}
		shards = append(shards, shard)
	}
	_ = reshard.Config{Shards: shards}
}
