package workload

import (
	"fmt"
	"net/url"

	"github.com/go-sql-driver/mysql"
)

// dsnAddr is the host:port a DSN of driver ("pgx": a URL; "mysql": the
// go-sql-driver format) connects to.
func dsnAddr(driver, dsn string) (string, error) {
	switch driver {
	case "pgx":
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("workload: %w", err)
		}
		return u.Host, nil
	case "mysql":
		c, err := mysql.ParseDSN(dsn)
		if err != nil {
			return "", fmt.Errorf("workload: %w", err)
		}
		return c.Addr, nil
	}
	return "", fmt.Errorf("workload: unknown driver %q", driver)
}

// dsnWithAddr is dsn connecting to addr (host:port) instead.
func dsnWithAddr(driver, dsn, addr string) (string, error) {
	switch driver {
	case "pgx":
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("workload: %w", err)
		}
		u.Host = addr
		return u.String(), nil
	case "mysql":
		c, err := mysql.ParseDSN(dsn)
		if err != nil {
			return "", fmt.Errorf("workload: %w", err)
		}
		c.Addr = addr
		return c.FormatDSN(), nil
	}
	return "", fmt.Errorf("workload: unknown driver %q", driver)
}
