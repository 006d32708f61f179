package freshread

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestVersionMatchesChangelog: Version, CHANGELOG.md and RELEASES agree.
// Between releases Version is the next release with "-dev", above the
// last one in RELEASES, and the changelog opens with "Unreleased"; in a
// release's own commit Version is that release and the changelog opens
// with its section. Every release in RELEASES has its section.
func TestVersionMatchesChangelog(t *testing.T) {
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	releases, err := os.ReadFile("RELEASES")
	if err != nil {
		t.Fatal(err)
	}
	semver := regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(-dev)?$`)
	m := semver.FindStringSubmatch(Version())
	if m == nil {
		t.Fatalf("Version() = %q, want X.Y.Z or X.Y.Z-dev", Version())
	}
	sections := regexp.MustCompile(`(?m)^## \[([^\]]+)\]`).FindAllStringSubmatch(string(changelog), -1)
	if len(sections) == 0 {
		t.Fatal("CHANGELOG.md has no section")
	}
	var last string
	for _, line := range strings.Split(string(releases), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 3 || !semver.MatchString(strings.TrimPrefix(f[0], "v")) || len(f[1]) != 40 {
			t.Fatalf("RELEASES: %q, want \"vX.Y.Z <40-digit commit> <date>\"", line)
		}
		last = strings.TrimPrefix(f[0], "v")
		if !regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(last) + `\] - ` + regexp.QuoteMeta(f[2]) + `$`).Match(changelog) {
			t.Errorf("CHANGELOG.md has no section \"## [%s] - %s\" for RELEASES' %s", last, f[2], f[0])
		}
	}
	if m[4] == "" {
		if sections[0][1] != Version() {
			t.Fatalf("Version() = %q is a release, but CHANGELOG.md opens with %q", Version(), sections[0][1])
		}
		return
	}
	if sections[0][1] != "Unreleased" {
		t.Fatalf("Version() = %q is between releases, but CHANGELOG.md opens with %q, not Unreleased", Version(), sections[0][1])
	}
	if last != "" && !newer(m[1:4], semver.FindStringSubmatch(last)[1:4]) {
		t.Fatalf("Version() = %q is not above the last release %s", Version(), last)
	}
}

// newer reports whether version a (major, minor, patch) is above b.
func newer(a, b []string) bool {
	for i := range a {
		x, _ := strconv.Atoi(a[i])
		y, _ := strconv.Atoi(b[i])
		if x != y {
			return x > y
		}
	}
	return false
}
