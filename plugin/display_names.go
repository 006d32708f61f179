package plugin

import "strings"

// Position names (lsnstore's keyed family: "orders#k:id=7", "orders#u",
// "orders#k=<signature>") are the store's; decisions, spans and logs show
// them as their users read them: "orders id=7", "orders (unkeyed
// writes)", "orders".

// displayName is the user-facing form of one position name.
func displayName(name string) string {
	i := strings.IndexByte(name, '#')
	if i < 0 {
		return name
	}
	table, rest := name[:i], name[i+1:]
	switch {
	case strings.HasPrefix(rest, "k:"): // a key: k:col=value
		return table + " " + rest[len("k:"):]
	case rest == "u": // the table's writes that proved no key
		return table + " (unkeyed writes)"
	case strings.HasPrefix(rest, "u:"): // writes that proved no value of a column
		return table + " (writes not keyed by " + rest[len("u:"):] + ")"
	case rest == "k", strings.HasPrefix(rest, "k="): // a keyed write of the table
		return table
	}
	return name
}

// displayNames is names in their user-facing form; nil stays nil, and
// names that need no change are returned as they are.
func displayNames(names []string) []string {
	changed := false
	for _, n := range names {
		if strings.IndexByte(n, '#') >= 0 {
			changed = true
			break
		}
	}
	if !changed {
		return names
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = displayName(n)
	}
	return out
}
