package classify

import "strings"

// Schema changes and catalog reads (Result.DDL, Result.Catalog).
//
// A catalog read answers from the system catalog, which a schema change
// rewrites: a replica that has not replayed the change answers for the old
// schema. The tests here are deliberately broad (a user table named pg_x
// counts as a catalog read): a false positive only makes a read wait for
// the last schema change, which is rare; a false negative reads a stale
// catalog.

// catalogSchemas are the schemas whose relations are the catalog, with
// their trailing dot: PostgreSQL's information_schema and pg_catalog,
// MySQL's and MariaDB's information_schema, mysql, performance_schema and
// sys.
var catalogSchemas = []string{"information_schema.", "pg_catalog.", "mysql.", "performance_schema.", "sys."}

// isCatalogTable reports whether name (normalized: lower case, quotes
// removed, schema-qualified when the SQL qualified it) names a catalog
// relation: one in a catalog schema, or an unqualified pg_* relation
// (pg_catalog is implicitly first on PostgreSQL's search path).
func isCatalogTable(name string) bool {
	for _, s := range catalogSchemas {
		if strings.HasPrefix(name, s) {
			return true
		}
	}
	return strings.HasPrefix(name, "pg_") && strings.IndexByte(name, '.') < 0
}

// pgCatalogFuncs are PostgreSQL functions, beyond the families matched by
// isCatalogFunc, whose result depends on the schema.
var pgCatalogFuncs = toSet(`format_type col_description obj_description shobj_description
	pg_describe_object pg_identify_object pg_identify_object_as_address pg_index_column_has_property
	pg_index_has_property pg_indexam_has_property pg_partition_tree pg_partition_ancestors
	pg_partition_root pg_sequence_parameters pg_options_to_table pg_has_role row_security_active
	pg_relation_filenode pg_relation_filepath pg_filenode_relation pg_tablespace_databases`)

// pgCatalogFuncsNot are pg_get_* functions that do not read the schema.
var pgCatalogFuncsNot = toSet(`pg_get_keywords pg_get_wal_resource_managers pg_get_shmem_allocations
	pg_get_backend_memory_contexts pg_get_replication_slots pg_get_wal_replay_pause_state`)

// isCatalogFunc reports whether calling the built-in function name (lower
// case, possibly qualified by pg_catalog) reads the schema: to_reg*,
// pg_get_*, has_*_privilege, pg_*_is_visible and the functions listed in
// pgCatalogFuncs. MySQL and MariaDB have no such functions.
func isCatalogFunc(d Dialect, name string) bool {
	if d != Postgres {
		return false
	}
	name = strings.TrimPrefix(name, "pg_catalog.")
	switch {
	case strings.HasPrefix(name, "to_reg"),
		strings.HasPrefix(name, "has_") && strings.HasSuffix(name, "_privilege"),
		strings.HasPrefix(name, "pg_") && strings.HasSuffix(name, "_is_visible"):
		return true
	case strings.HasPrefix(name, "pg_get_"):
		_, not := pgCatalogFuncsNot[name]
		return !not
	}
	_, ok := pgCatalogFuncs[name]
	return ok
}

// pgRegTypes are the object identifier types: a cast to one of them
// ('orders'::regclass) looks the name up in the catalog.
var pgRegTypes = toSet(`regclass regcollation regconfig regdictionary regnamespace regoper
	regoperator regproc regprocedure regrole regtype`)

// hasRegType reports whether toks name an object identifier type anywhere
// (a cast or a column of that type): a catalog lookup.
func hasRegType(toks []token) bool {
	for _, t := range toks {
		if t.kind == tIdent {
			if _, ok := pgRegTypes[t.text]; ok {
				return true
			}
		}
	}
	return false
}

// IsCatalogTable reports whether a table name, as SQL or GORM spell it
// (quoted or not, in any case, qualified or not), names a catalog relation
// (see Result.Catalog). Allocation-free for plain lower-case names.
func IsCatalogTable(name string) bool {
	if strings.ContainsAny(name, "\"` ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
		name = strings.ToLower(strings.TrimSpace(name))
		name = strings.NewReplacer(`"`, "", "`", "").Replace(name)
	}
	return isCatalogTable(name)
}
