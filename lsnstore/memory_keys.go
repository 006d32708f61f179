package lsnstore

import (
	"context"
	"strings"
	"sync/atomic"
	"time"
)

// memoryKeyCap bounds the key positions (keys.go) a Memory store keeps:
// past it, every key position is folded into its table's unkeyed position
// and dropped, which keeps every keyed read at least as conservative.
const memoryKeyCap = 1 << 17

// keyCell is a key position. A writer that raised a cell found dead
// (folded concurrently) raises the unkeyed position too, so no raise is
// lost; a reader loads key cells before unkeyed positions, so a cell
// folded after it looked is covered by the unkeyed position it loads next.
type keyCell struct {
	positionCell
	unkeyed string
	dead    atomic.Bool
}

// cell returns name's position cell in m.tables, creating it. A plain
// table's cell links its unkeyed position's cell, so that raising both
// allocates nothing after the first time.
func (m *Memory) cell(name string) *positionCell {
	v, ok := m.tables.Load(name)
	if !ok {
		c := new(positionCell)
		if _, unkeyed := raiseTarget(name); unkeyed {
			c.unkeyed = m.cell(UnkeyedName(name))
		}
		v, _ = m.tables.LoadOrStore(name, c)
	}
	return v.(*positionCell)
}

// raiseName raises what name stands for in Raise (raiseTarget); a plain
// table's unkeyed position through its cell's link, allocation-free.
func (m *Memory) raiseName(name string, pos Position) {
	if isKeyName(name) {
		m.raiseKey(name, pos)
		return
	}
	t, unkeyed := raiseTarget(name)
	c := m.cell(t)
	c.raise(pos)
	if unkeyed {
		c.unkeyed.raise(pos)
	} else if _, sig, ok := signedTarget(name); ok {
		cur, ok := m.sigs.Load(t)
		if !ok {
			cur, _ = m.sigs.LoadOrStore(t, sig)
		}
		if cur.(string) != sig {
			m.cell(UnkeyedName(t)).raise(pos)
		}
	}
}

var (
	_ KeySignatures = (*Memory)(nil)
	_ KeySignatures = (*Redis)(nil)
)

// ClaimSignature implements KeySignatures.
func (m *Memory) ClaimSignature(_ context.Context, table, sig string) (string, time.Duration, error) {
	cur, _ := m.sigs.LoadOrStore(table, sig)
	return cur.(string), 0, nil
}

func (m *Memory) raiseKey(name string, pos Position) {
	v, ok := m.keys.Load(name)
	if !ok {
		if m.nkeys.Add(1) > memoryKeyCap {
			m.foldKeys()
		}
		unkeyed := UnkeyedName(name[:strings.Index(name, keyInfix)])
		var loaded bool
		v, loaded = m.keys.LoadOrStore(name, &keyCell{unkeyed: unkeyed})
		if loaded {
			m.nkeys.Add(-1)
		}
	}
	c := v.(*keyCell)
	c.raise(pos)
	if c.dead.Load() {
		m.cell(c.unkeyed).raise(pos)
	}
}

// foldKeys folds every key position into its table's unkeyed position.
func (m *Memory) foldKeys() {
	m.foldMu.Lock()
	defer m.foldMu.Unlock()
	if m.nkeys.Load() <= memoryKeyCap {
		return // folded by another writer meanwhile
	}
	m.keys.Range(func(k, v any) bool {
		c := v.(*keyCell)
		c.dead.Store(true)
		m.cell(c.unkeyed).raise(c.load())
		m.keys.Delete(k)
		m.nkeys.Add(-1)
		return true
	})
}
