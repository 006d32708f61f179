package depgraph

import (
	"fmt"
	"slices"
)

// Self-dependencies. A graph's edges are of two kinds:
//
//   - effects: a write to the table runs more writes, to the rows of
//     another table or of itself, that the statement does not name
//     (triggers and the functions they call, rules, cascading foreign
//     keys);
//   - aliases: the same rows seen under another name (a view and the
//     tables it reads; a partitioned or inheritance parent and its
//     children). A write through one name changes what the other returns,
//     but only the rows the statement names.
//
// A table is self-dependent when a write to it may change rows of it that
// the write does not name: an effect edge to itself (a trigger writing its
// own table, a self-referencing cascading foreign key, a rule), a cycle
// back to it through at least one effect edge (a trigger on A writing B
// whose trigger writes A), or a column that is part of a key changing
// without the statement naming it (keyMoves). Cycles made of aliases alone
// (a parent and its partition, a table and its updatable view) are not:
// both names show the same rows, under the same keys.
//
// A self-dependent table gets an explicit edge to itself, which
// lsnstore.CloseGraph keeps; the plugin then raises the table's unkeyed
// position with every write to it, so that a read of any of its keys waits.

// edgeBuilder collects a graph's edges by kind.
type edgeBuilder struct {
	edges   map[string][]string // every edge, without self edges until selfDependent
	effects map[string][]string // the effect edges, self edges included
	reasons map[string][]string // why each self-dependent table is
}

func newEdgeBuilder() *edgeBuilder {
	return &edgeBuilder{edges: map[string][]string{}, effects: map[string][]string{}, reasons: map[string][]string{}}
}

// effect records that a write to from may write rows of to.
func (b *edgeBuilder) effect(from, to, why string) {
	if !slices.Contains(b.effects[from], to) {
		b.effects[from] = append(b.effects[from], to)
	}
	if from == to {
		b.self(from, why)
		return
	}
	b.alias(from, to)
}

// alias records that a write to from changes what a read of to returns,
// in the rows the write names.
func (b *edgeBuilder) alias(from, to string) {
	if from != to && !slices.Contains(b.edges[from], to) {
		b.edges[from] = append(b.edges[from], to)
	}
}

// self records that t is self-dependent, and why.
func (b *edgeBuilder) self(t, why string) {
	if !slices.Contains(b.edges[t], t) {
		b.edges[t] = append(b.edges[t], t)
	}
	if !slices.Contains(b.reasons[t], why) {
		b.reasons[t] = append(b.reasons[t], why)
	}
}

// cycles marks every table that reaches itself through a path holding at
// least one effect edge (the search runs over pairs of a table and whether
// an effect edge was crossed on the way).
func (b *edgeBuilder) cycles() {
	isEffect := func(from, to string) bool { return slices.Contains(b.effects[from], to) }
	type state struct {
		t      string
		effect bool
	}
	for start := range b.edges {
		if slices.Contains(b.edges[start], start) {
			continue
		}
		seen := map[state]bool{}
		stack := []state{{start, false}}
		found := ""
		for len(stack) > 0 && found == "" {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, next := range b.edges[s.t] {
				n := state{next, s.effect || isEffect(s.t, next)}
				if next == start && n.effect {
					found = s.t
					break
				}
				if next != start && !seen[n] {
					seen[n] = true
					stack = append(stack, n)
				}
			}
		}
		if found != "" {
			b.self(start, fmt.Sprintf("a write to %s reaches %s again through a trigger, rule or cascade (by way of %s)", start, start, found))
		}
	}
}

// keyMoves marks self-dependent every table with a key column in moves
// (table -> columns a write may change without naming them, "*" any);
// keys is table -> the columns of its primary key and unique indexes.
func (b *edgeBuilder) keyMoves(m *moves, keys map[string][]string) {
	for t, cols := range m.cols {
		for _, c := range cols {
			if c == "*" || slices.Contains(keys[t], c) {
				b.self(t, m.why[t+"."+c])
			}
		}
	}
}

// moves collects, per table, the columns a write may change without
// naming them ("*": any column), and why.
type moves struct {
	cols map[string][]string
	why  map[string]string // "table.column" -> the first reason
}

func newMoves() *moves { return &moves{cols: map[string][]string{}, why: map[string]string{}} }

func (m *moves) add(table, col, reason string) {
	if !slices.Contains(m.cols[table], col) {
		m.cols[table] = append(m.cols[table], col)
	}
	if _, ok := m.why[table+"."+col]; !ok {
		m.why[table+"."+col] = reason
	}
}
