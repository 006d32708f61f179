package plugin

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// claimCounter is a store that counts the signature claims it answers.
type claimCounter struct {
	*lsnstore.Memory
	claims int
}

func (c *claimCounter) ClaimSignature(ctx context.Context, table, sig string) (string, time.Duration, error) {
	c.claims++
	return c.Memory.ClaimSignature(ctx, table, sig)
}

// TestKeysAgreedSkipsAnOpenBreaker: while the circuit breaker is open on
// the store (down or unreachable), a statement's key-signature check does
// not ask the store (it would wait a whole timeout) and answers no: table
// positions, safe. Once the breaker closes the store is asked again.
func TestKeysAgreedSkipsAnOpenBreaker(t *testing.T) {
	store := &claimCounter{Memory: lsnstore.NewMemory()}
	p := &Plugin{cfg: Config{Store: store, Logger: slog.New(slog.DiscardHandler)}}
	tn := &tableKeyNames{}
	p.breaker.Failure(time.Now(), 1)
	if p.keysAgreed(context.Background(), tn, "items", "v1:id;") {
		t.Error("keys agreed with the breaker open, want table positions")
	}
	if store.claims != 0 {
		t.Errorf("the store was asked %d times with the breaker open, want 0", store.claims)
	}
	p.breaker.Success()
	if !p.keysAgreed(context.Background(), tn, "items", "v1:id;") {
		t.Error("keys not agreed with the breaker closed and the store holding no signature")
	}
	if store.claims != 1 {
		t.Errorf("the store was asked %d times with the breaker closed, want 1", store.claims)
	}
}
