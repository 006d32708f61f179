package plugin

import (
	"math"
	"testing"

	"github.com/freshread/freshread/lsnstore"
)

// TestIntegerKeyNamesUnchanged: an integer key's name is the one every
// earlier version gives it (lsnstore.KeyName), so processes of both
// versions sharing a store name the same rows the same way.
func TestIntegerKeyNamesUnchanged(t *testing.T) {
	for _, v := range []any{0, 1, 99, 100, -5, int8(-128), uint16(65535), int64(math.MaxInt64), int64(math.MinInt64), uint64(math.MaxInt64)} {
		got, ok := keyInt.canon(v)
		if !ok {
			t.Fatalf("%T %v: not canonical", v, v)
		}
		n, _ := integerValue(v)
		if name, want := lsnstore.KeyNameText("items", "id", got), lsnstore.KeyName("items", "id", n); name != want {
			t.Errorf("%T %v: %q, want %q", v, v, name, want)
		}
	}
	if sig := newKeyDef([]string{"id"}, []keyType{keyInt}).sig; sig != "id" {
		t.Errorf("an integer key's signature part is %q, want the column alone", sig)
	}
}
