//go:build !unix

package testcluster

import "os"

// lockFile does not lock where flock is missing: concurrent builds of the
// test image then only duplicate work.
func lockFile(string) (func(), error) { return func() {}, nil }

// tryLockFile does not lock where flock is missing: ports are then kept
// apart only within one process.
func tryLockFile(*os.File) bool { return true }
