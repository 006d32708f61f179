// Package mysqlfamily links freshread's MySQL and MariaDB support: the
// classification of MySQL statements (TiDB's SQL parser), the plugin's
// MariaDB and MySQL engines and the classification of their errors. A
// service on MySQL or MariaDB imports it for its side effect, as it
// imports a database/sql driver:
//
//	import _ "github.com/freshread/freshread/mysqlfamily"
//
// A service on PostgreSQL does not, and does not link any of it. Without
// it, a MySQL or MariaDB dialector is refused with an error naming this
// import (db.Use of the plugin, a sharding guard), and classify.Classifier
// of the MySQL dialect classifies every text as a Write to unknown tables.
package mysqlfamily

import (
	_ "github.com/freshread/freshread/internal/mysqlclassify" // TiDB's parser for classify
)
