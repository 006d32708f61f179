package linearize

import (
	"sort"
	"time"
)

// Result is a check's verdict.
type Result string

// The verdicts (porcupine's words): linearizable, not, or not decided
// before the deadline.
const (
	Ok      Result = "Ok"
	Illegal Result = "Illegal"
	Unknown Result = "Unknown"
)

// Operation is one operation of a history: its input, its output, and its
// call and return times (any unit; an operation returning when another is
// called is concurrent with it).
type Operation[I, O any] struct {
	Input        I
	Output       O
	Call, Return int64
}

// Model is a sequential object: its initial state, and Step, which says
// whether input may give output in state and the state after.
type Model[S comparable, I, O any] struct {
	Init S
	Step func(state S, input I, output O) (bool, S)
}

// node is a call or return entry of the history's doubly linked list; a
// call's match is its return.
type node[I, O any] struct {
	op         *Operation[I, O]
	id         int
	match      *node[I, O]
	prev, next *node[I, O]
}

func lift[I, O any](n *node[I, O]) {
	n.prev.next = n.next
	n.next.prev = n.prev
	m := n.match
	m.prev.next = m.next
	if m.next != nil {
		m.next.prev = m.prev
	}
}

func unlift[I, O any](n *node[I, O]) {
	m := n.match
	m.prev.next = m
	if m.next != nil {
		m.next.prev = m
	}
	n.prev.next = n
	n.next.prev = n
}

// cacheKey is a set of linearized operations (a bitset as a string) and
// the state after them.
type cacheKey[S comparable] struct {
	linearized string
	state      S
}

type bitset []uint64

func (b bitset) set(i int)   { b[i/64] |= 1 << (i % 64) }
func (b bitset) clear(i int) { b[i/64] &^= 1 << (i % 64) }

func (b bitset) key() string {
	out := make([]byte, 0, 8*len(b))
	for _, w := range b {
		for s := 0; s < 64; s += 8 {
			out = append(out, byte(w>>s))
		}
	}
	return string(out)
}

// Check says whether ops is linearizable for m; Unknown when deadline
// (zero: none) passes first.
func Check[S comparable, I, O any](m Model[S, I, O], ops []Operation[I, O], deadline time.Time) Result {
	type entry struct {
		time   int64
		call   bool
		id     int
		before int // order of the events of equal time: calls first
	}
	entries := make([]entry, 0, 2*len(ops))
	for i, op := range ops {
		entries = append(entries, entry{op.Call, true, i, 0}, entry{op.Return, false, i, 1})
	}
	sort.SliceStable(entries, func(i, j int) bool {
		if entries[i].time != entries[j].time {
			return entries[i].time < entries[j].time
		}
		return entries[i].before < entries[j].before
	})
	// The list: a head, then the entries by time.
	head := &node[I, O]{id: -1}
	returns := make([]*node[I, O], len(ops))
	for i := range ops {
		returns[i] = &node[I, O]{op: &ops[i], id: i}
	}
	prev := head
	for _, e := range entries {
		n := returns[e.id]
		if e.call {
			n = &node[I, O]{op: &ops[e.id], id: e.id, match: returns[e.id]}
		}
		n.prev, prev.next = prev, n
		prev = n
	}

	type frame struct {
		n     *node[I, O]
		state S
	}
	linearized := make(bitset, (len(ops)+63)/64)
	cache := map[cacheKey[S]]bool{}
	var calls []frame
	state := m.Init
	n := head.next
	for steps := 0; head.next != nil; steps++ {
		if steps%1024 == 0 && !deadline.IsZero() && time.Now().After(deadline) {
			return Unknown
		}
		if n.match != nil { // a call: try to linearize it here
			ok, next := m.Step(state, n.op.Input, n.op.Output)
			if ok {
				linearized.set(n.id)
				k := cacheKey[S]{linearized.key(), next}
				if !cache[k] {
					cache[k] = true
					calls = append(calls, frame{n, state})
					state = next
					lift(n)
					n = head.next
					continue
				}
				linearized.clear(n.id)
			}
			n = n.next
			continue
		}
		// A return whose call is not linearized: undo the last choice.
		if len(calls) == 0 {
			return Illegal
		}
		top := calls[len(calls)-1]
		calls = calls[:len(calls)-1]
		state = top.state
		linearized.clear(top.n.id)
		unlift(top.n)
		n = top.n.next
	}
	return Ok
}
