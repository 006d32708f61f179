package sharding

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/freshread/freshread/internal/engines"
)

// Recovery of the prepared XA parts of writes over several MariaDB shards
// (xa.go): listed with XA RECOVER, resolved by their coordinator's
// decision (xa_decisions.go).

// xaPrepared is a prepared XA transaction the plugin made, as XA RECOVER
// lists it.
type xaPrepared struct {
	gtrid, bqual string
}

// xaPreparedParts lists the plugin's prepared XA transactions on sh's
// server; mine are those of sh's database.
func (sh *shard) xaPreparedParts(ctx context.Context) (all []xaPrepared, err error) {
	db, err := sh.sqlDB()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var format, gl, bl int
		var data []byte
		if err := rows.Scan(&format, &gl, &bl, &data); err != nil {
			return nil, err
		}
		if gl < 0 || bl < 0 || gl+bl > len(data) {
			continue
		}
		p := xaPrepared{gtrid: string(data[:gl]), bqual: string(data[gl : gl+bl])}
		if _, ok := parseGTRID(p.gtrid); ok {
			all = append(all, p)
		}
	}
	return all, rows.Err()
}

// recoverXA resolves the prepared XA parts of sh's database; it returns
// how many it left, and every global ID it saw prepared on the server.
func (s *Sharding) recoverXA(ctx context.Context, sh *shard) (left int, seen map[string]bool, _ error) {
	info := s.xaInfo(ctx, sh)
	if !info.capable {
		return 0, nil, nil
	}
	parts, err := sh.xaPreparedParts(ctx)
	if err != nil {
		return 1, nil, fmt.Errorf("sharding: list prepared XA parts on shard %q: %w", sh.name, err)
	}
	seen = map[string]bool{}
	var errs []error
	for _, p := range parts {
		seen[p.gtrid] = true
		if p.bqual != info.schema {
			continue // another database's, on the same server
		}
		done, err := s.resolveXAPart(ctx, sh, p.gtrid, info.schema)
		if err != nil {
			errs = append(errs, err)
		}
		if !done {
			left++
		}
	}
	return left, seen, errors.Join(errs...)
}

// resolveXAPart commits or rolls back the prepared part gtrid on sh by
// its coordinator's decision; done is false when that is not known yet
// (the coordinator's transaction is still open), or when the part is
// still held by the connection that prepared it.
func (s *Sharding) resolveXAPart(ctx context.Context, sh *shard, gtrid, schema string) (done bool, _ error) {
	coordName, _ := parseGTRID(gtrid)
	coord := s.byName[coordName]
	if coord == nil {
		return false, fmt.Errorf("sharding: prepared XA part %q on shard %q names coordinator shard %q, which is not configured: resolve it by hand (XA COMMIT or XA ROLLBACK)", gtrid, sh.name, coordName)
	}
	outcome, err := s.xaDecision(ctx, coord, gtrid)
	if err != nil || outcome == "" {
		return false, err
	}
	verb := "XA COMMIT "
	if outcome != "c" {
		verb = "XA ROLLBACK "
	}
	err = sh.db.WithContext(ctx).Exec(verb + xidSQL(gtrid, schema)).Error
	if n, _ := engines.MySQLErrorNumber(err); n == 1397 { // XAER_NOTA: resolved meanwhile, or still held by its connection
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sharding: %s prepared XA part %q on shard %q: %w", strings.TrimSpace(verb), gtrid, sh.name, err)
	}
	s.logger().Info("sharding: recovery resolved a prepared part of a write over several shards", "shard", sh.name, "gtrid", gtrid, "committed", outcome == "c")
	return true, nil
}
