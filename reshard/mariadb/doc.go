// Package mariadb links what package reshard needs to move buckets
// between MariaDB shards: the MySQL driver support of mysqlfamily and a
// binlog reader (github.com/go-mysql-org/go-mysql) for the move's
// catch-up. A mover (a program, or the service that runs reshard) whose
// shards are MariaDB imports it for its side effect:
//
//	import _ "github.com/freshread/freshread/reshard/mariadb"
//
// A mover on PostgreSQL does not, and links none of it. Without it, a
// move between MariaDB shards is refused at reshard.New with an error
// naming this import.
package mariadb
