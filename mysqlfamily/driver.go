package mysqlfamily

import (
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/engines"
)

func init() {
	engines.MySQL = &engines.MySQLDriver{
		ErrorNumber:         errorNumber,
		SQLState:            sqlState,
		InvalidConn:         func(err error) bool { return errors.Is(err, mysql.ErrInvalidConn) },
		WithoutVersionQuery: withoutVersionQuery,
		DialectorKey:        dialectorKey,
	}
}

func errorNumber(err error) (uint16, bool) {
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		return myErr.Number, true
	}
	return 0, false
}

func sqlState(err error) (string, bool) {
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		return string(myErr.SQLState[:]), true
	}
	return "", false
}

// withoutVersionQuery returns d, or for a MySQL dialector that would ask
// the server its version when opened (Config.SkipInitializeWithVersion
// unset), a copy that does not (see the plugin's use of it).
func withoutVersionQuery(d gorm.Dialector) gorm.Dialector {
	md, ok := d.(*gmysql.Dialector)
	if !ok || md.Config == nil || md.Config.SkipInitializeWithVersion {
		return d
	}
	c := *md.Config
	c.SkipInitializeWithVersion = true
	return &gmysql.Dialector{Config: &c}
}

// dialectorKey names the server and settings of a MySQL dialector opened
// from a DSN: two replicas with the same key are the same.
func dialectorKey(d gorm.Dialector) (string, bool) {
	md, ok := d.(*gmysql.Dialector)
	if !ok || md.Config == nil || md.Config.DSN == "" || md.Config.Conn != nil || md.Config.DefaultDatetimePrecision != nil {
		return "", false
	}
	c := *md.Config
	c.DSNConfig = nil // parsed from DSN, or DSN formatted from it
	return fmt.Sprintf("mysql %+v", c), true
}
