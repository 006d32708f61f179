package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// guardToggle is what measureGuard needs of an engine: n single-row
// INSERTs of orders on s0 in one transaction, run on the server, and
// the guard's INSERT trigger on s0's orders switched off and on.
type guardToggle struct {
	inserts func(ctx context.Context, n, base int) error
	set     func(ctx context.Context, on bool) error
}

func pgGuardToggle(e *env) guardToggle {
	db := e.db["s0"]
	return guardToggle{
		inserts: func(ctx context.Context, n, base int) error {
			_, err := db.ExecContext(ctx, fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP INSERT INTO orders (id, user_id, status) VALUES (%d + i, i %% 4, 'x'); END LOOP; END $$`, n, base))
			return err
		},
		set: func(ctx context.Context, on bool) error {
			verb := "DISABLE"
			if on {
				verb = "ENABLE"
			}
			_, err := db.ExecContext(ctx, `ALTER TABLE orders `+verb+` TRIGGER `+guardTrigger)
			return err
		},
	}
}

// mariaGuardToggle: MariaDB cannot disable a trigger, so set drops the
// guard's INSERT trigger of orders and creates it again from the
// statement that created it (read once, while it is installed).
func mariaGuardToggle(e *env) guardToggle {
	db := e.db["s0"]
	var name, create string
	return guardToggle{
		inserts: func(ctx context.Context, n, base int) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(`BEGIN NOT ATOMIC
  DECLARE i INT DEFAULT 1;
  WHILE i <= %d DO
    INSERT INTO orders (id, user_id, status) VALUES (%d + i, i %% 4, 'x');
    SET i = i + 1;
  END WHILE;
END`, n, base)); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		set: func(ctx context.Context, on bool) error {
			if on {
				_, err := db.ExecContext(ctx, create)
				return err
			}
			if name == "" {
				var err error
				if name, create, err = mariaInsertGuard(ctx, db); err != nil {
					return err
				}
			}
			_, err := db.ExecContext(ctx, "DROP TRIGGER "+mquote(name))
			return err
		},
	}
}

// mariaInsertGuard returns the name of the guard's INSERT trigger on
// orders and the statement that created it.
func mariaInsertGuard(ctx context.Context, db *sql.DB) (name, create string, err error) {
	if err := db.QueryRowContext(ctx, `SELECT TRIGGER_NAME FROM information_schema.TRIGGERS
 WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'orders' AND EVENT_MANIPULATION = 'INSERT' AND TRIGGER_NAME LIKE 'freshread_guard%'`).Scan(&name); err != nil {
		return "", "", fmt.Errorf("the guard's INSERT trigger on orders: %w", err)
	}
	rows, err := db.QueryContext(ctx, "SHOW CREATE TRIGGER "+mquote(name))
	if err != nil {
		return "", "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", "", err
	}
	if !rows.Next() {
		return "", "", fmt.Errorf("SHOW CREATE TRIGGER %s: no row", name)
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", "", err
	}
	for i, c := range cols {
		if strings.EqualFold(c, "SQL Original Statement") {
			return name, vals[i].String, nil
		}
	}
	return "", "", fmt.Errorf("SHOW CREATE TRIGGER %s: no SQL Original Statement in %v", name, cols)
}

// logName names the log the catch-up reads: the lag's bytes are of it.
func logName(e *env) string {
	if e.maria != nil {
		return "binlog"
	}
	return "WAL"
}
