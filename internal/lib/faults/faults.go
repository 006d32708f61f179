package faults

import "sync/atomic"

// Func decides the outcome of a step: a non-nil error is the step's
// failure.
type Func func(step string) error

var hook atomic.Pointer[Func]

// Set installs f (nil removes it) and returns a function that restores
// the one it replaced.
func Set(f Func) (restore func()) {
	var p *Func
	if f != nil {
		p = &f
	}
	old := hook.Swap(p)
	return func() { hook.Store(old) }
}

// At returns the failure a test chose for step, or nil.
func At(step string) error {
	if p := hook.Load(); p != nil {
		return (*p)(step)
	}
	return nil
}
