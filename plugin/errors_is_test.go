package plugin

import (
	"testing"

	"github.com/freshread/freshread/internal/lib/sentineltest"
)

// Every sentinel of the package has its Is helper, which sees it through
// wrapping and rejects the others.
func TestIsHelpers(t *testing.T) {
	for _, problem := range sentineltest.Problems(map[error]func(error) bool{
		ErrConfig: IsConfig, ErrNotReplica: IsNotReplica, ErrDBResolver: IsDBResolver,
		ErrNotInstalled: IsNotInstalled, ErrPrivilege: IsPrivilege, ErrWriteOnReplica: IsWriteOnReplica,
		ErrForeignTransaction: IsForeignTransaction, ErrStoreUnreachable: IsStoreUnreachable,
		ErrFallbackLimited: IsFallbackLimited, ErrSeveralServers: IsSeveralServers, ErrPooler: IsPooler,
		ErrSessionAborted: IsSessionAborted, ErrBadToken: IsBadToken, ErrUnknownResolver: IsUnknownResolver,
		ErrClosed: IsClosed,
	}) {
		t.Error(problem)
	}
}
