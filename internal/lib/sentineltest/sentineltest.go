package sentineltest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// declared matches a sentinel declared with errors.New or fmt.Errorf.
var declared = regexp.MustCompile(`(?m)^\s*(?:var )?(Err[A-Za-z]+)\s*=\s*(?:errors\.New|fmt\.Errorf)\(`)

// Problems returns what is wrong with helpers (sentinel -> its Is
// helper): a helper that does not see its sentinel wrapped, or takes
// another sentinel of the map or an unrelated error, and sentinels that
// the package in the current directory declares but helpers lacks.
func Problems(helpers map[error]func(error) bool) []string {
	var out []string
	files, _ := filepath.Glob("*.go")
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return append(out, err.Error())
		}
		for _, m := range declared.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
	}
	if len(names) != len(helpers) {
		out = append(out, fmt.Sprintf("%d sentinels declared (%v), %d with a helper checked: a sentinel added later needs its Is helper and its line in the test", len(names), names, len(helpers)))
	}
	for sentinel, is := range helpers {
		if !is(fmt.Errorf("context: %w", sentinel)) {
			out = append(out, fmt.Sprintf("%v: its helper does not see it wrapped", sentinel))
		}
		for other := range helpers {
			if other != sentinel && is(other) {
				out = append(out, fmt.Sprintf("%v: its helper takes %v", sentinel, other))
			}
		}
		if is(errors.New("other")) {
			out = append(out, fmt.Sprintf("%v: its helper takes another error", sentinel))
		}
	}
	return out
}
