package plugin

import (
	"database/sql"
	"time"
)

// over returns p with every zero field taken from def (a replica's Pool
// over Config.ReplicaPool).
func (p Pool) over(def Pool) Pool {
	if p.MaxOpenConns == 0 {
		p.MaxOpenConns = def.MaxOpenConns
	}
	if p.MaxIdleConns == 0 {
		p.MaxIdleConns = def.MaxIdleConns
	}
	if p.ConnMaxLifetime == 0 {
		p.ConnMaxLifetime = def.ConnMaxLifetime
	}
	if p.ConnMaxIdleTime == 0 {
		p.ConnMaxIdleTime = def.ConnMaxIdleTime
	}
	return p
}

// poolSettings is what apply calls on a *sql.DB: a setter per field that
// is not zero, with "none" (negative) as database/sql spells it.
type poolSettings interface {
	SetMaxOpenConns(int)
	SetMaxIdleConns(int)
	SetConnMaxLifetime(time.Duration)
	SetConnMaxIdleTime(time.Duration)
}

var _ poolSettings = (*sql.DB)(nil)

// apply sets db's pool from p; zero fields are left as they are.
func (p Pool) apply(db poolSettings) {
	if p.MaxOpenConns != 0 {
		db.SetMaxOpenConns(max(p.MaxOpenConns, 0)) // 0: no limit
	}
	if p.MaxIdleConns != 0 {
		db.SetMaxIdleConns(max(p.MaxIdleConns, -1)) // ≤ 0: none kept
	}
	if p.ConnMaxLifetime != 0 {
		db.SetConnMaxLifetime(max(p.ConnMaxLifetime, 0)) // 0: no limit
	}
	if p.ConnMaxIdleTime != 0 {
		db.SetConnMaxIdleTime(max(p.ConnMaxIdleTime, 0))
	}
}
