package reshard

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// Fence states (freshread_bucket_fence.state).
const (
	// FenceIncoming: the bucket is being copied to this shard, which does
	// not own it yet: application writes would be lost or overwritten.
	FenceIncoming = "incoming"
	// FenceMoved: the bucket has left this shard (or is switching away):
	// writes belong to the new owner.
	FenceMoved = "moved"
)

// guardTrigger is the name of the guard's trigger on every sharded table.
const guardTrigger = "freshread_guard"

var nonWord = regexp.MustCompile(`[^a-z0-9_]+`)

// guardFunction is the name of the guard's function of a table: readable
// and unique per table.
func guardFunction(rel relName) string {
	h := sha256.Sum256([]byte(rel.schema + "." + rel.name))
	base := nonWord.ReplaceAllString(strings.ToLower(rel.name), "_")
	if len(base) > 30 {
		base = base[:30]
	}
	return "freshread_guard_" + base + "_" + hex.EncodeToString(h[:4])
}

// guardBody is the PL/pgSQL body of the guard function of a table with key
// column key and nb buckets. Without a fence on the row's bucket it costs
// one primary-key lookup in the (small) fence table; the mover's own
// sessions (freshread.mover = on) pass.
func guardBody(schema, key string, nb int) string {
	k := quoteIdent(key)
	check := func(row string) string {
		return fmt.Sprintf(`    b := (%[1]s.%[2]s %% %[3]d)::int4;
    SELECT f.state, f.move_id INTO st, mid FROM %[4]s.freshread_bucket_fence f WHERE f.bucket = b;
    IF FOUND AND current_setting('freshread.mover', true) IS DISTINCT FROM 'on' THEN
      RAISE EXCEPTION USING ERRCODE = 'FRB01',
        MESSAGE = format('freshread: %%s: bucket %%s is %%s on this shard (move %%s): write refused', TG_TABLE_NAME, b, st, mid),
        HINT = 'refresh the bucket map and retry on the shard that owns the bucket';
    END IF;
`, row, k, nb, quoteIdent(schema))
	}
	return fmt.Sprintf(`
DECLARE
  b int4;
  st text;
  mid text;
BEGIN
  IF TG_OP <> 'DELETE' THEN
%s  END IF;
  IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.%s IS DISTINCT FROM NEW.%s) THEN
%s  END IF;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  RETURN NEW;
END
`, check("NEW"), k, k, check("OLD"))
}

// installGuard creates the fence table and the guard trigger of every
// table on one shard; it changes nothing already in place.
func installGuard(ctx context.Context, db *sql.DB, schema string, tables []*tableSide, nb int) error {
	qs := quoteIdent(schema)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+qs+`.freshread_bucket_fence (
  bucket int4 PRIMARY KEY,
  state text NOT NULL CHECK (state IN ('incoming', 'moved')),
  move_id text NOT NULL
)`); err != nil {
		return err
	}
	for _, t := range tables {
		fn := guardFunction(t.rel)
		body := guardBody(schema, t.key.name, nb)
		var have bool
		err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_trigger g ON g.tgfoid = p.oid
  WHERE n.nspname = $1 AND p.proname = $2 AND p.prosrc = $3 AND g.tgrelid = to_regclass($4) AND g.tgname = $5 AND g.tgenabled <> 'D')`,
			schema, fn, body, t.qname, guardTrigger).Scan(&have)
		if err != nil {
			return err
		}
		if have {
			continue
		}
		qfn := qs + "." + quoteIdent(fn)
		if _, err := db.ExecContext(ctx, `CREATE OR REPLACE FUNCTION `+qfn+`() RETURNS trigger LANGUAGE plpgsql AS `+dollarQuote(body)); err != nil {
			return fmt.Errorf("guard function of %s: %w", t.qname, err)
		}
		if _, err := db.ExecContext(ctx, `CREATE OR REPLACE TRIGGER `+guardTrigger+` BEFORE INSERT OR UPDATE OR DELETE ON `+t.qname+
			` FOR EACH ROW EXECUTE FUNCTION `+qfn+`()`); err != nil {
			return fmt.Errorf("guard trigger of %s: %w", t.qname, err)
		}
	}
	return nil
}

func dollarQuote(body string) string {
	tag := "$freshread$"
	for strings.Contains(body, tag) {
		tag = "$freshread_" + tag[1:]
	}
	return tag + body + tag
}

// fence marks buckets with state for move on a shard, in tx. A bucket
// fenced by another move is refused (ErrBusy).
func fence(ctx context.Context, tx *sql.Tx, schema string, buckets []int, state, move string) error {
	qs := quoteIdent(schema)
	var other sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT string_agg(bucket || ' (' || move_id || ')', ', ') FROM `+qs+`.freshread_bucket_fence
 WHERE bucket = ANY($1::int4[]) AND move_id <> $2 AND state = 'incoming'`, int32s(buckets), move).Scan(&other)
	if err != nil {
		return err
	}
	if other.Valid {
		return fmt.Errorf("%w: buckets fenced by another move: %s", ErrBusy, other.String)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO `+qs+`.freshread_bucket_fence (bucket, state, move_id)
 SELECT b, $2, $3 FROM unnest($1::int4[]) AS b
 ON CONFLICT (bucket) DO UPDATE SET state = EXCLUDED.state, move_id = EXCLUDED.move_id`, int32s(buckets), state, move)
	return err
}

// unfence removes move's fences of state on buckets.
func unfence(ctx context.Context, q querier, schema string, buckets []int, state, move string) error {
	_, err := q.ExecContext(ctx, `DELETE FROM `+quoteIdent(schema)+`.freshread_bucket_fence
 WHERE bucket = ANY($1::int4[]) AND state = $2 AND move_id = $3`, int32s(buckets), state, move)
	return err
}
