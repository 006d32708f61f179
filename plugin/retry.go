package plugin

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// retryable reports whether a read that failed on a replica with err may be
// run again on the primary: connection failures and recovery conflicts, not
// the caller's own cancellation and not ordinary SQL errors.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // shutdown, crash, cannot connect now
			return true
		case pgErr.Code == "40001" || pgErr.Code == "40P01":
			// Recovery conflicts on a standby use these codes with
			// "conflict with recovery" in the detail or message.
			return strings.Contains(pgErr.Message, "recovery") || strings.Contains(pgErr.Detail, "recovery")
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}
