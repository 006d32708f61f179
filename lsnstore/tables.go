package lsnstore

import (
	"slices"
	"strings"
)

// Schema is the name under which a database's schema position is stored:
// every schema change (CREATE, ALTER, DROP, RENAME, ...) raises it, and
// every read of the system catalog (information_schema, pg_catalog,
// catalog functions, SHOW) includes it, so a replica that has not replayed
// the last schema change is not asked about the schema. Stored like a
// table; TableKey never produces it from a table name unless the table is
// literally named "#schema", which only sends more reads to the primary.
const Schema = "#schema"

// TableKey maps a table name, as SQL or GORM spell it, to the name its
// position is stored under: quotes removed, the schema dropped, lower case.
// Two distinct tables may share a key (sales.orders and public.orders,
// "Orders" and orders); that only sends more reads to the primary, never a
// stale one. The plugin and the tracker both name tables with it.
// Allocation-free for names that are already plain lower case.
func TableKey(name string) string {
	plain := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '.' || c == '"' || c == '`' || (c >= 'A' && c <= 'Z') || c == ' ' || c == '#' {
			plain = false
			break
		}
	}
	if plain {
		return name
	}
	name = strings.TrimSpace(name)
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Trim(name, "\"`")
	// '#' starts the names of keyed positions (keys.go): a table whose
	// name holds one is stored under "%23" instead.
	return strings.ReplaceAll(strings.ToLower(name), "#", "%23")
}

// CloseGraph returns the transitive closure of a dependency graph: for each
// table, every table reachable from it, sorted. A table is in its own list
// only when the graph has an edge from it to itself (it writes rows of
// itself that a statement does not name: depgraph's self-dependencies),
// not for a cycle through other tables. Tables that reach nothing are left
// out. Everything ("*") is kept like any other name.
func CloseGraph(edges map[string][]string) map[string][]string {
	out := make(map[string][]string, len(edges))
	for t := range edges {
		seen := map[string]bool{t: true}
		stack := slices.Clone(edges[t])
		var reach []string
		if slices.Contains(edges[t], t) {
			reach = append(reach, t)
		}
		for len(stack) > 0 {
			d := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[d] {
				continue
			}
			seen[d] = true
			reach = append(reach, d)
			stack = append(stack, edges[d]...)
		}
		if len(reach) > 0 {
			slices.Sort(reach)
			out[t] = reach
		}
	}
	return out
}
