package main

// The command classifies MySQL statements, runs MariaDB shards and moves
// buckets between them.
import (
	_ "github.com/freshread/freshread/mysqlfamily"
	_ "github.com/freshread/freshread/reshard/mariadb"
)
