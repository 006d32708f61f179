package engines

import (
	"fmt"

	"gorm.io/gorm"
)

// MySQLFamilyImport is the import that links MySQL and MariaDB support.
const MySQLFamilyImport = `import _ "github.com/freshread/freshread/mysqlfamily"`

// MySQLSink receives what a MySQL statement does; package classify
// implements it over its result builder.
type MySQLSink interface {
	// Buffer raises the statement's kind to Buffer.
	Buffer()
	// Write raises the statement's kind to Write.
	Write()
	// Guess records a Write that is a guess, with its reason;
	// unknownTables reports that the tables written cannot be named.
	Guess(reason string, unknownTables bool)
	// TxnEnd records a transaction end (COMMIT, ROLLBACK).
	TxnEnd()
	// Lock records row or table locking.
	Lock()
	// SchemaChange records a change of the persistent schema.
	SchemaChange()
	// Catalog records a read of the catalog (SHOW).
	Catalog()
	// IsTemp reports whether name is a temporary table created earlier in
	// the text.
	IsTemp(name string) bool
	// AddTemp records the creation of temporary table name.
	AddTemp(name string)
	// AddRead records a read of table name.
	AddRead(name string)
	// AddWrite records a write of table name.
	AddWrite(name string)
	// Function records a call of function name with nargs arguments.
	Function(name string, nargs int)
	// Explain runs walk, then drops every effect it recorded except the
	// tables read (plain EXPLAIN).
	Explain(walk func())
}

// MySQLStatement parses one MySQL or MariaDB statement (the text between
// two semicolons) and records what it does in s; it returns false, having
// recorded nothing, when its parser rejects the text. Nil until
// internal/mysqlclassify is linked (by mysqlfamily).
var MySQLStatement func(text string, s MySQLSink) bool

// MySQLFamilyLinked reports whether MySQL and MariaDB support is linked.
func MySQLFamilyLinked() bool { return MySQLStatement != nil && MySQL != nil }

// NotLinkedError reports that a part of freshread a service uses is not
// linked; its message names the import that links it.
type NotLinkedError struct {
	// Pkg is the package reporting it ("plugin", "classify", ...).
	Pkg string
	// What is the part missing ("MySQL/MariaDB support").
	What string
	// Import is the import that links it.
	Import string
	// Err is the package's error it is a case of (plugin.ErrConfig), for
	// errors.Is; nil for none.
	Err error
}

func (e *NotLinkedError) Error() string {
	return fmt.Sprintf("%s: %s is not linked: add %s", e.Pkg, e.What, e.Import)
}

// Unwrap returns Err.
func (e *NotLinkedError) Unwrap() error { return e.Err }

// MySQLFamilyNotLinked is the NotLinkedError of MySQL and MariaDB support
// for package pkg, a case of err (nil for none).
func MySQLFamilyNotLinked(pkg string, err error) error {
	return &NotLinkedError{Pkg: pkg, What: "MySQL/MariaDB support", Import: MySQLFamilyImport, Err: err}
}

// MySQLDriver is what freshread needs of the MySQL drivers
// (github.com/go-sql-driver/mysql, gorm.io/driver/mysql); mysqlfamily sets
// MySQL to it.
type MySQLDriver struct {
	// ErrorNumber returns the number of the MySQL server error in err's
	// chain (a *mysql.MySQLError); false when there is none.
	ErrorNumber func(err error) (uint16, bool)
	// SQLState returns the SQLSTATE of the MySQL server error in err's
	// chain; false when there is none.
	SQLState func(err error) (string, bool)
	// InvalidConn reports whether err is the driver's invalid connection
	// (mysql.ErrInvalidConn).
	InvalidConn func(err error) bool
	// WithoutVersionQuery returns d when it is not a MySQL dialector that
	// asks the server its version when opened, else a copy that does not.
	WithoutVersionQuery func(d gorm.Dialector) gorm.Dialector
	// DialectorKey returns a text naming the server and settings a MySQL
	// dialector opened from a DSN opens; false when d is not one.
	DialectorKey func(d gorm.Dialector) (string, bool)
}

// MySQL is the MySQL driver; nil until mysqlfamily is linked.
var MySQL *MySQLDriver

// MySQLErrorNumber is MySQL.ErrorNumber, false when MySQL is not linked
// (then err holds no MySQL error either).
func MySQLErrorNumber(err error) (uint16, bool) {
	if MySQL == nil {
		return 0, false
	}
	return MySQL.ErrorNumber(err)
}

// MySQLSQLState is MySQL.SQLState, false when MySQL is not linked (then
// err holds no MySQL error either).
func MySQLSQLState(err error) (string, bool) {
	if MySQL == nil {
		return "", false
	}
	return MySQL.SQLState(err)
}
