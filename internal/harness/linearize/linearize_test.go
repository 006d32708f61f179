package linearize

import (
	"testing"
	"time"
)

// register: a write of a version (Input >= 0) or a read (Input -1)
// returning one.
var register = Model[int64, int64, int64]{
	Init: 0,
	Step: func(s, in, out int64) (bool, int64) {
		if in >= 0 {
			return true, in
		}
		return out == s, s
	},
}

func w(v, call, ret int64) Operation[int64, int64] {
	return Operation[int64, int64]{Input: v, Call: call, Return: ret}
}

func r(v, call, ret int64) Operation[int64, int64] {
	return Operation[int64, int64]{Input: -1, Output: v, Call: call, Return: ret}
}

func TestRegister(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []Operation[int64, int64]
		want Result
	}{
		{"empty", nil, Ok},
		{"initial", []Operation[int64, int64]{r(0, 0, 1)}, Ok},
		{"after the write", []Operation[int64, int64]{w(1, 0, 10), r(1, 11, 12)}, Ok},
		{"stale after the write", []Operation[int64, int64]{w(1, 0, 10), r(0, 11, 12)}, Illegal},
		{"concurrent, old", []Operation[int64, int64]{w(1, 0, 10), r(0, 5, 12)}, Ok},
		{"concurrent, new", []Operation[int64, int64]{w(1, 0, 10), r(1, 5, 12)}, Ok},
		{"touching is concurrent", []Operation[int64, int64]{w(1, 0, 10), r(0, 10, 12)}, Ok},
		{"never written", []Operation[int64, int64]{w(1, 0, 10), r(2, 5, 12)}, Illegal},
		// Two reads during a write: new then old is not atomic.
		{"new then old", []Operation[int64, int64]{w(1, 0, 100), r(1, 10, 15), r(0, 20, 25)}, Illegal},
		{"old then new", []Operation[int64, int64]{w(1, 0, 100), r(0, 10, 15), r(1, 20, 25)}, Ok},
		// Backtracking: w2 must go before w1 for the read of 1 to follow.
		{"order among concurrent writes", []Operation[int64, int64]{w(1, 0, 50), w(2, 0, 50), r(1, 60, 61)}, Ok},
		{"read between", []Operation[int64, int64]{w(1, 0, 50), w(2, 0, 50), r(1, 60, 61), r(2, 62, 63)}, Illegal},
	} {
		if got := Check(register, c.ops, time.Time{}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A deadline already past: Unknown, not a verdict.
func TestDeadline(t *testing.T) {
	var ops []Operation[int64, int64]
	for i := int64(0); i < 40; i++ {
		ops = append(ops, w(i+1, 0, 100))
	}
	ops = append(ops, r(1000, 200, 201))
	if got := Check(register, ops, time.Now().Add(-time.Second)); got != Unknown {
		t.Fatalf("%v, want Unknown", got)
	}
}
