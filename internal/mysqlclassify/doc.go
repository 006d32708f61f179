// Package mysqlclassify is the part of package classify that parses MySQL
// and MariaDB statements with TiDB's parser. Importing it registers it
// (internal/engines); github.com/freshread/freshread/mysqlfamily does, so
// that a service on PostgreSQL does not link TiDB's parser, its logging
// (zap) and the golang.org/x/text encodings it reaches.
package mysqlclassify
