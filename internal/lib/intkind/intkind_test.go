package intkind

import "testing"

type userID int64

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want int64
		ok   bool
	}{
		{5, 5, true}, {int8(-3), -3, true}, {uint16(7), 7, true}, {userID(9), 9, true},
		{uint64(1 << 63), 0, false}, {"5", 0, false}, {5.0, 0, false}, {nil, 0, false},
	} {
		got, ok := Of(tc.v)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("Of(%#v) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}
