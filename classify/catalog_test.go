package classify

import (
	"slices"
	"testing"
)

// schemaCase is a statement's schema effects: whether it changes the
// schema, whether it reads the catalog, and (for a schema change) the
// tables it names or that they are unknown.
type schemaCase struct {
	sql     string
	ddl     bool
	catalog bool
	writes  []string
	unknown bool
}

func checkSchemaCases(t *testing.T, d Dialect, cases []schemaCase) {
	t.Helper()
	c := New(Config{Dialect: d, CacheSize: -1})
	for _, tc := range cases {
		got := c.Classify(tc.sql)
		if got.DDL != tc.ddl {
			t.Errorf("%v %q: DDL %v, want %v", d, tc.sql, got.DDL, tc.ddl)
		}
		if got.Catalog != tc.catalog {
			t.Errorf("%v %q: Catalog %v, want %v", d, tc.sql, got.Catalog, tc.catalog)
		}
		if got.DDL && got.Kind != Write {
			t.Errorf("%v %q: a schema change classified %v", d, tc.sql, got.Kind)
		}
		if tc.ddl && !slices.Equal(got.Writes, tc.writes) {
			t.Errorf("%v %q: writes %q, want %q", d, tc.sql, got.Writes, tc.writes)
		}
		if tc.ddl && got.UnknownTables != tc.unknown {
			t.Errorf("%v %q: unknown tables %v, want %v", d, tc.sql, got.UnknownTables, tc.unknown)
		}
	}
}

// The statements GORM's PostgreSQL Migrator sends (gorm.io/driver/postgres
// migrator.go), and the DDL forms around them.
func TestPostgresSchemaChangesAndCatalogReads(t *testing.T) {
	checkSchemaCases(t, Postgres, []schemaCase{
		{sql: `CREATE TABLE "widgets" ("id" bigserial,"name" text,PRIMARY KEY ("id"))`, ddl: true, writes: l("widgets")},
		{sql: `CREATE TABLE IF NOT EXISTS public.widgets (id int)`, ddl: true, writes: l("public.widgets")},
		{sql: `ALTER TABLE "widgets" ADD "color" text`, ddl: true, writes: l("widgets")},
		{sql: `ALTER TABLE "widgets" RENAME TO "gadgets"`, ddl: true, writes: l("gadgets", "widgets")},
		{sql: `ALTER TABLE shop.widgets RENAME TO gadgets`, ddl: true, writes: l("shop.gadgets", "shop.widgets")},
		{sql: `ALTER TABLE "widgets" RENAME COLUMN "name" TO "title"`, ddl: true, writes: l("widgets")},
		{sql: `ALTER TABLE "widgets" ALTER COLUMN "name" TYPE varchar(10)`, ddl: true, writes: l("widgets")},
		{sql: `DROP TABLE IF EXISTS "widgets"`, ddl: true, writes: l("widgets")},
		{sql: `DROP TABLE IF EXISTS "widgets" CASCADE`, ddl: true, writes: l("widgets"), unknown: true},
		{sql: `DROP TABLE a, b`, ddl: true, writes: l("a", "b")},
		{sql: `CREATE INDEX IF NOT EXISTS "idx_widgets_name" ON "widgets" ("name")`, ddl: true, writes: l("widgets")},
		{sql: `CREATE UNIQUE INDEX CONCURRENTLY i ON widgets (name)`, ddl: true, writes: l("widgets")},
		{sql: `DROP INDEX "idx_widgets_name"`, ddl: true, unknown: true},
		{sql: `ALTER INDEX "a" RENAME TO "b"`, ddl: true, unknown: true},
		{sql: `CREATE VIEW v AS SELECT * FROM widgets`, ddl: true, writes: l("v")},
		{sql: `COMMENT ON COLUMN "widgets"."name" IS 'x'`, ddl: true, unknown: true},
		{sql: `CREATE SEQUENCE IF NOT EXISTS s AS bigint`, ddl: true, writes: l("s")},
		{sql: `CREATE TYPE mood AS ENUM ('a')`, ddl: true, unknown: true},
		{sql: `CREATE TRIGGER t AFTER INSERT ON widgets FOR EACH ROW EXECUTE FUNCTION f()`, ddl: true, unknown: true},
		{sql: `GRANT SELECT ON widgets TO bob`, ddl: true, unknown: true},
		{sql: `SELECT * INTO archive FROM widgets`, ddl: true, writes: l("archive")},
		// Not schema changes.
		{sql: `TRUNCATE widgets`},
		{sql: `INSERT INTO widgets (name) VALUES ('a')`},
		{sql: `CREATE TEMP TABLE scratch (id int)`},
		{sql: `CREATE TEMP TABLE scratch (id int); DROP TABLE scratch`},
		{sql: `SELECT * INTO TEMP scratch FROM widgets`},
		{sql: `VACUUM widgets`},
		// Catalog reads.
		{sql: `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2 AND table_type = $3`, catalog: true},
		{sql: `SELECT count(*) FROM pg_indexes WHERE tablename = $1 AND indexname = $2 AND schemaname = $3`, catalog: true},
		{sql: `SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a JOIN pg_class b ON a.attrelid = b.oid AND relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1) WHERE b.relname = $2`, catalog: true},
		{sql: `SELECT to_regclass('widgets')`, catalog: true},
		{sql: `SELECT pg_catalog.pg_get_viewdef('v'::regclass)`, catalog: true},
		{sql: `SELECT has_table_privilege('widgets', 'select')`, catalog: true},
		{sql: `SELECT pg_table_is_visible(42)`, catalog: true},
		{sql: `SELECT obj_description(42)`, catalog: true},
		{sql: `SELECT 'widgets'::regclass::oid`, catalog: true},
		{sql: `SELECT * FROM "information_schema"."columns"`, catalog: true},
		{sql: `SELECT c.oid FROM orders o JOIN pg_class c ON c.relname = 'orders'`, catalog: true},
		{sql: `EXPLAIN SELECT * FROM information_schema.tables`, catalog: true},
		// Not catalog reads.
		{sql: `SELECT CURRENT_DATABASE()`},
		{sql: `SELECT CURRENT_SCHEMA()`},
		{sql: `SELECT * FROM widgets WHERE id = 1`},
		{sql: `SELECT * FROM shop.pg_like_name`},
		{sql: `SELECT pg_get_keywords()`},
		{sql: `SHOW search_path`},
	})
}

// The statements GORM's MySQL Migrator sends (gorm.io/driver/mysql
// migrator.go and gorm's own migrator), and MariaDB's forms.
func TestMySQLSchemaChangesAndCatalogReads(t *testing.T) {
	checkSchemaCases(t, MySQL, []schemaCase{
		{sql: "CREATE TABLE `widgets` (`id` bigint unsigned AUTO_INCREMENT,`name` longtext,PRIMARY KEY (`id`))", ddl: true, writes: l("widgets")},
		{sql: "ALTER TABLE `widgets` ADD `color` longtext", ddl: true, writes: l("widgets")},
		{sql: "ALTER TABLE `widgets` RENAME TO `gadgets`", ddl: true, writes: l("gadgets", "widgets")},
		{sql: "RENAME TABLE widgets TO gadgets, a TO b", ddl: true, writes: l("a", "b", "gadgets", "widgets")},
		{sql: "ALTER TABLE `widgets` RENAME COLUMN `name` TO `title`", ddl: true, writes: l("widgets")},
		{sql: "DROP TABLE IF EXISTS `widgets` CASCADE", ddl: true, writes: l("widgets")},
		{sql: "CREATE INDEX `idx_widgets_name` ON `widgets`(`name`)", ddl: true, writes: l("widgets")},
		{sql: "DROP INDEX `idx_widgets_name` ON `widgets`", ddl: true, writes: l("widgets")},
		{sql: "CREATE VIEW v AS SELECT * FROM widgets", ddl: true, writes: l("v")},
		{sql: "CREATE TRIGGER t AFTER INSERT ON widgets FOR EACH ROW INSERT INTO audit VALUES (1)", ddl: true, unknown: true},
		{sql: "DROP TRIGGER t", ddl: true, unknown: true},
		{sql: "CREATE DATABASE shop", ddl: true, unknown: true},
		// MariaDB syntax TiDB's parser rejects: the token-level fallback.
		{sql: "ALTER TABLE widgets ADD COLUMN IF NOT EXISTS c int, RENAME TO gadgets, ALGORITHM=NOCOPY, WAIT 5", ddl: true, writes: l("widgets"), unknown: true},
		// Not schema changes.
		{sql: "TRUNCATE widgets"},
		{sql: "CREATE TEMPORARY TABLE scratch (id int)"},
		{sql: "SET FOREIGN_KEY_CHECKS = 0"},
		// Catalog reads.
		{sql: "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ? AND table_type = ?", catalog: true},
		{sql: "SELECT SCHEMA_NAME from Information_schema.SCHEMATA where SCHEMA_NAME LIKE ? ORDER BY SCHEMA_NAME=? DESC,SCHEMA_NAME limit 1", catalog: true},
		{sql: "SHOW TABLES", catalog: true},
		{sql: "SHOW COLUMNS FROM widgets", catalog: true},
		{sql: "SHOW INDEX FROM widgets", catalog: true},
		{sql: "SHOW CREATE TABLE widgets", catalog: true},
		{sql: "DESCRIBE widgets", catalog: true},
		{sql: "SELECT * FROM mysql.proc", catalog: true},
		// Not catalog reads.
		{sql: "SELECT DATABASE()"},
		{sql: "SELECT * FROM widgets"},
	})
}

func TestIsCatalogTable(t *testing.T) {
	for name, want := range map[string]bool{
		"information_schema.tables":     true,
		`"information_schema"."tables"`: true,
		"Information_Schema.COLUMNS":    true,
		"`mysql`.`proc`":                true,
		"pg_class":                      true,
		"pg_catalog.pg_class":           true,
		"orders":                        false,
		`"public"."orders"`:             false,
		"shop.pg_orders":                false,
	} {
		if got := IsCatalogTable(name); got != want {
			t.Errorf("IsCatalogTable(%q) = %v, want %v", name, got, want)
		}
	}
}
