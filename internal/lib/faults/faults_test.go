package faults

import (
	"errors"
	"testing"
)

func TestSetAndRestore(t *testing.T) {
	if err := At("x"); err != nil {
		t.Fatalf("At without Set: %v", err)
	}
	boom := errors.New("boom")
	restore := Set(func(step string) error {
		if step == "x" {
			return boom
		}
		return nil
	})
	if err := At("x"); !errors.Is(err, boom) {
		t.Fatalf("At(x) = %v, want boom", err)
	}
	if err := At("y"); err != nil {
		t.Fatalf("At(y) = %v, want nil", err)
	}
	restore()
	if err := At("x"); err != nil {
		t.Fatalf("At after restore: %v", err)
	}
}
