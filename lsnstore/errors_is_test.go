package lsnstore

import (
	"testing"

	"github.com/freshread/freshread/internal/lib/sentineltest"
)

// Every sentinel of the package has its Is helper, which sees it through
// wrapping and rejects the others.
func TestIsHelpers(t *testing.T) {
	for _, problem := range sentineltest.Problems(map[error]func(error) bool{ErrDiscontinuity: IsDiscontinuity, ErrStoreFormat: IsStoreFormat, ErrBadPosition: IsBadPosition, ErrNoDatabase: IsNoDatabase}) {
		t.Error(problem)
	}
}
