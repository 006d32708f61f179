package testcluster

// Every test package that starts servers through this package may run
// MariaDB and MySQL, whose support a service links by importing
// mysqlfamily, and move buckets between MariaDB shards, which a mover
// links by importing reshard/mariadb: importing them here links them into
// each of them.
import (
	_ "github.com/freshread/freshread/mysqlfamily"
	_ "github.com/freshread/freshread/reshard/mariadb"
)
