package main

// The demo runs MariaDB shards and moves buckets between them.
import (
	_ "github.com/freshread/freshread/mysqlfamily"
	_ "github.com/freshread/freshread/reshard/mariadb"
)
