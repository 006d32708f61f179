package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every sentinel of the package has its Is helper, which sees it through
// wrapping and rejects the others.
func TestIsHelpers(t *testing.T) {
	helpers := map[error]func(error) bool{
		ErrConfig: IsConfig, ErrNotReplica: IsNotReplica, ErrDBResolver: IsDBResolver,
		ErrNotInstalled: IsNotInstalled, ErrPrivilege: IsPrivilege, ErrWriteOnReplica: IsWriteOnReplica,
		ErrForeignTransaction: IsForeignTransaction, ErrStoreUnreachable: IsStoreUnreachable,
		ErrFallbackLimited: IsFallbackLimited, ErrSeveralServers: IsSeveralServers, ErrPooler: IsPooler,
		ErrSessionAborted: IsSessionAborted, ErrBadToken: IsBadToken, ErrUnknownResolver: IsUnknownResolver,
		ErrClosed: IsClosed,
	}
	// A sentinel added later needs its helper (and its line above).
	files, _ := filepath.Glob("*.go")
	declared := regexp.MustCompile(`(?m)^\s*(?:var )?(Err[A-Za-z]+)\s+= errors\.New`)
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range declared.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
	}
	if len(names) != len(helpers) {
		t.Errorf("%d sentinels declared (%v), %d with a helper here", len(names), names, len(helpers))
	}
	for sentinel, is := range helpers {
		if !is(fmt.Errorf("context: %w", sentinel)) {
			t.Errorf("the helper of %v does not see it wrapped", sentinel)
		}
		for other := range helpers {
			if other != sentinel && is(other) {
				t.Errorf("the helper of %v accepts %v", sentinel, other)
			}
		}
	}
}
