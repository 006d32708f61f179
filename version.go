package freshread

// version is this tree's release: the latest release's number while the
// tree is that release, and the next one with "-dev" between releases
// (CHANGELOG.md, "Unreleased"). docs/releasing.md says how to cut one.
const version = "0.2.0-dev"

// Version returns the freshread release this code is, in semantic
// versioning without the leading "v" ("0.1.0"; "0.2.0-dev" between
// releases). Processes sharing a position store record it beside the
// store's format (lsnstore.FormatVersion), so that a refusal names both
// releases.
func Version() string { return version }
