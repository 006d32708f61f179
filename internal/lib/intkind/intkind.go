// Package intkind reads a Go value of any integer kind (named or not) as
// an int64, for the plugins that route by integer keys (plugin's keyed
// positions, sharding's shard keys).
package intkind

import "reflect"

// Of returns v as an int64 when its kind is an integer kind and its value
// fits; false for anything else (a string, a float, a pointer, nil).
func Of(v any) (int64, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u := rv.Uint()
		return int64(u), u <= 1<<63-1
	}
	return 0, false
}
