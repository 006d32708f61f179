package sqltext

import (
	"regexp"
	"strings"
)

// Aggregate matches a call of an aggregate or window function.
var Aggregate = regexp.MustCompile(`(?i)\b(count|sum|avg|min|max|array_agg|string_agg|json_agg|jsonb_agg|json_object_agg|jsonb_object_agg|bool_and|bool_or|every|bit_and|bit_or|stddev\w*|var_\w+|variance|percentile_\w+|mode|rank|dense_rank|row_number|ntile|lag|lead|first_value|last_value|nth_value)\s*\(`)

// NormalizeTable lower-cases a table name and drops quotes and schema.
func NormalizeTable(name string) string {
	name = strings.TrimSpace(name)
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return strings.ToLower(strings.Trim(name, "\"`"))
}
